#include "mixgrad/ops/bitwise.h"

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// Integer (and, but for the shifts, bool) operands only, as PyTorch's kernels.
void check_bits(const char* op, const Tensors& in, bool bool_ok) {
  const DType t = in[0].dtype();
  const bool ok = is_integral(t) || (bool_ok && t == DType::Bool);
  if (in.size() == 1) {
    MG_CHECK(ok, DTypeError, op, ": expected an integer", bool_ok ? " or bool" : "", " tensor, got ", describe(in[0]),
             "\n  hint: bitwise ops have no meaning for floating values; for masks use logical_not");
  } else {
    MG_CHECK(ok, DTypeError, op, ": expected integer", bool_ok ? " or bool" : "", " tensors, got ", describe(in[0]),
             " and ", describe(in[1]), "\n  hint: bitwise ops have no meaning for floating values");
  }
}
#define MG_BITWISE_INFER(name, bool_ok)                                   \
  InferResult infer_##name(const Tensors& in, const OpAttrs&) {           \
    check_bits(#name, in, bool_ok);                                       \
    return in.size() == 1 ? infer_unary_any(#name, in) : infer_broadcast(#name, in, std::nullopt); \
  }
MG_BITWISE_INFER(bitwise_and, true)
MG_BITWISE_INFER(bitwise_or, true)
MG_BITWISE_INFER(bitwise_xor, true)
MG_BITWISE_INFER(bitwise_not, true)
MG_BITWISE_INFER(bitwise_left_shift, false)
MG_BITWISE_INFER(bitwise_right_shift, false)
#undef MG_BITWISE_INFER

// Both operands in their promoted dtype (u8 with i32 is i32), as the arithmetic ops.
Tensor bitwise(OpId op, const char* name, const Tensor& a, const Tensor& b) {
  check_defined(name, a, b);
  const DType t = promote_types(a.dtype(), b.dtype());
  return dispatch1(op, {a.dtype() == t ? a : to(a, t), b.dtype() == t ? b : to(b, t)});
}

}  // namespace

void register_bitwise_rules() {
  set_op_rule(OpId::bitwise_and, {.infer = infer_bitwise_and});
  set_op_rule(OpId::bitwise_or, {.infer = infer_bitwise_or});
  set_op_rule(OpId::bitwise_xor, {.infer = infer_bitwise_xor});
  set_op_rule(OpId::bitwise_not, {.infer = infer_bitwise_not});
  set_op_rule(OpId::bitwise_left_shift, {.infer = infer_bitwise_left_shift});
  set_op_rule(OpId::bitwise_right_shift, {.infer = infer_bitwise_right_shift});
}

Tensor bitwise_and(const Tensor& a, const Tensor& b) { return bitwise(OpId::bitwise_and, "bitwise_and", a, b); }
Tensor bitwise_or(const Tensor& a, const Tensor& b) { return bitwise(OpId::bitwise_or, "bitwise_or", a, b); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b) { return bitwise(OpId::bitwise_xor, "bitwise_xor", a, b); }
Tensor bitwise_not(const Tensor& x) {
  check_defined("bitwise_not", x);
  return dispatch1(OpId::bitwise_not, {x});
}
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b) {
  return bitwise(OpId::bitwise_left_shift, "bitwise_left_shift", a, b);
}
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b) {
  return bitwise(OpId::bitwise_right_shift, "bitwise_right_shift", a, b);
}
Tensor operator<<(const Tensor& a, const Tensor& b) { return bitwise_left_shift(a, b); }
Tensor operator>>(const Tensor& a, const Tensor& b) { return bitwise_right_shift(a, b); }
// The count in the tensor's dtype (a bool tensor's in i64, then refused by name).
Tensor operator<<(const Tensor& a, int64_t b) {
  check_defined("bitwise_left_shift", a);
  return bitwise_left_shift(a, full({}, double(b), {.dtype = is_integral(a.dtype()) ? a.dtype() : DType::I64, .device = a.device()}));
}
Tensor operator>>(const Tensor& a, int64_t b) {
  check_defined("bitwise_right_shift", a);
  return bitwise_right_shift(a, full({}, double(b), {.dtype = is_integral(a.dtype()) ? a.dtype() : DType::I64, .device = a.device()}));
}

}  // namespace mg
