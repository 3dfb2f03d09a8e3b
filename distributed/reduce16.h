// Element-wise reduction of 16-bit float chunks, the function Gloo's ring all_reduce calls at
// every hop when f16/bf16 tensors travel in their own dtype (ProcessGroupGloo's native path).
// Decision: each call loads both inputs into f32, combines them there and rounds the result once
// to the 16-bit dtype (DESIGN §3: storage type != compute type), so a reduction over W ranks
// rounds W-1 times (once per hop), never more; max and min are exact and propagate NaN.
// Block-wise through the bulk conversions of core/convert.h (F16C/AVX-512 where present).
//
//   mg::distributed::reduce16(mg::DType::F16, mg::distributed::ReduceOp::Sum, out, a, b, n);
#pragma once
#include <cstddef>

#include "mixgrad/core/dtype.h"
#include "mixgrad/distributed/reduce_op.h"

namespace mg::distributed {

// out[i] = op(a[i], b[i]) for n elements of `dtype` (F16 or BF16); Avg adds like Sum (the group
// divides once at the end). out may equal a or b.
void reduce16(DType dtype, ReduceOp op, void* out, const void* a, const void* b, std::size_t n);

}  // namespace mg::distributed
