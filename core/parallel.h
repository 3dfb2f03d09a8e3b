// parallel_for: splits [begin, end) into chunks run on the worker threads (OpenMP). Ranges with
// fewer than `grain` elements run inline on the calling thread, so small tensors pay no
// threading overhead.
//
//   mg::parallel_for(0, n, 32768, [&](int64_t b, int64_t e) { for (...) });
#pragma once
#include <cstdint>
#include <functional>

namespace mg {

inline constexpr int64_t kDefaultGrain = 32768;

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);
// Number of worker threads, for the whole process (defaults to the hardware concurrency or
// OMP_NUM_THREADS): set_num_threads from any thread applies to every thread's ops, as PyTorch's
// torch.set_num_threads (OpenMP's own setting is per thread).
int num_threads();
void set_num_threads(int n);
// Makes this thread's OpenMP setting, which oneDNN reads, follow set_num_threads (the dispatcher
// and parallel_for call it; one atomic load when nothing changed).
void apply_num_threads();
// True inside a parallel_for body; nested calls then run inline.
bool in_parallel_region();

}  // namespace mg
