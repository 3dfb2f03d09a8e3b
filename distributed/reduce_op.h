// ReduceOp: how all_reduce and reduce_scatter combine the ranks' values; AllReduceOptions adds
// the precision of 16-bit reductions.
// Decision: Avg is the sum divided once by the world size in the accumulation type (f32 for
// f16/bf16); it is refused for integer tensors rather than truncating silently.
// f16/bf16 travel in their own dtype by default (half the bytes of f32), each hop adding in f32
// and rounding once: W-1 roundings over W ranks. reduce_in_f32 widens the tensor to f32 first and
// rounds once at the end, at twice the bytes (docs/distributed.md, "Numerics").
//
//   pg.all_reduce(grad, mg::distributed::ReduceOp::Avg);
//   pg.all_reduce(grad16, {.op = mg::distributed::ReduceOp::Sum, .reduce_in_f32 = true});
#pragma once

namespace mg::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };

struct AllReduceOptions {
  ReduceOp op = ReduceOp::Sum;
  // f16/bf16 only (ignored for other dtypes): reduce a widened f32 copy and round once, instead
  // of communicating in the tensor's dtype with one rounding per hop.
  bool reduce_in_f32 = false;
};

// "sum", "avg", "max", "min": the names errors print.
inline const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

}  // namespace mg::distributed
