// ReduceOp: how all_reduce and reduce_scatter combine the ranks' values.
// Decision: Avg is a sum divided by the world size in the accumulation type (f32 for f16/bf16),
// so it rounds once; it is refused for integer tensors rather than truncating silently.
//
//   pg.all_reduce(grad, mg::distributed::ReduceOp::Avg);
#pragma once

namespace mg::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };

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
