// The one kernel cuda/graph.cpp needs before each replay: write a generator's {seed, offset} into
// the device pair its captured random ops read. Internal to cuda/.
#pragma once
#include <cstdint>

namespace mg::cuda {

// dst: device [2] i64 = {seed, offset}, written on `stream` (a cudaStream_t) without waiting.
void write_philox_base(int64_t* dst, uint64_t seed, uint64_t offset, void* stream);

}  // namespace mg::cuda
