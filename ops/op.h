// Op identities and their static description, generated from ops/op_list.def, plus the mutable
// autocast policy table (set_policy overrides a built-in op's policy, like Apex's
// register_half_function / register_float_function / register_promote_function).
//
//   mg::op_name(mg::OpId::matmul)          // "matmul"
//   mg::set_policy("softmax", mg::CastPolicy::Fp32);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"

namespace mg {

// What autocast does to an op's floating inputs (DESIGN §4).
enum class CastPolicy : uint8_t {
  Lower,    // to the autocast dtype (f16 or bf16)
  Fp32,     // to f32
  Promote,  // to the widest floating dtype among the inputs
  Keep,     // unchanged
  Banned,   // an error with advice under f16 autocast
};
const char* policy_name(CastPolicy p);
// Parses "lower", "fp32", "promote", "keep", "banned".
CastPolicy policy_from_name(const std::string& name);

enum class OpId : uint16_t {
#define MG_OP(name, arity, policy, diff) name,
#include "mixgrad/ops/op_list.def"
#undef MG_OP
  kCount
};
inline constexpr int kNumOps = int(OpId::kCount);

// One row of the op list (ops/op_list.def): the op's name (errors, docs/ops.md), its number of
// tensor inputs, the cast policy autocast applies unless overridden (DESIGN §4), and whether
// autograd records it.
struct OpDesc {
  const char* name;
  int arity;  // -1: variadic
  CastPolicy default_policy;
  bool differentiable;
};

// The op list's row of `op`, and its name ("matmul").
const OpDesc& op_desc(OpId op);
inline const char* op_name(OpId op) { return op_desc(op).name; }
// Finds an op by name; throws mg::Error listing nothing but the bad name when unknown.
OpId op_from_name(const std::string& name);
// The op's current autocast policy (the default unless overridden).
CastPolicy op_policy(OpId op);
// Overrides the policy of a built-in op (process-wide). Overriding an op that already carries a
// different override is an error (a conflicting registration); reset_policy(op) or
// reset_policies() restore the defaults.
void set_policy(OpId op, CastPolicy policy);
void set_policy(const std::string& op, CastPolicy policy);
void reset_policy(OpId op);
void reset_policy(const std::string& op);
void reset_policies();

// Non-tensor arguments of an op call. Each op documents in op_list.def which fields it reads;
// one small struct keeps the dispatcher, the kernels and the backward rules uniform (like
// ggml's op_params).
struct OpAttrs {
  std::vector<int64_t> dims;  // reduction dims / permutation (wrapped, for reductions sorted)
  std::vector<int64_t> ints;  // shapes, {start, end, step}, {num_classes}
  int64_t dim = 0;
  bool keepdim = false;
  double alpha = 1.0;
  double beta = 1.0;
  int64_t mode = 0;
  DType dtype = DType::F32;
  Device device;
};

}  // namespace mg
