// Storage for the rule table and the kernel table (both indexed by OpId).
#include <array>

#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/op_rule.h"

namespace mg {
namespace {

std::array<OpRule, kNumOps>& rules() {
  static std::array<OpRule, kNumOps> table{};
  return table;
}

std::array<std::array<std::array<KernelFn, kNumDTypes>, 2>, kNumOps>& kernels() {
  static std::array<std::array<std::array<KernelFn, kNumDTypes>, 2>, kNumOps> table{};
  return table;
}

}  // namespace

void set_op_rule(OpId op, const OpRule& rule) { rules()[int(op)] = rule; }
const OpRule& op_rule(OpId op) { return rules()[int(op)]; }
bool has_op_rule(OpId op) {
  const OpRule& r = rules()[int(op)];
  return r.infer != nullptr || r.view != nullptr;
}

void register_kernel(OpId op, DeviceType device, DType dtype, KernelFn fn) {
  kernels()[int(op)][int(device)][int(dtype)] = fn;
}
KernelFn find_kernel(OpId op, DeviceType device, DType dtype) {
  return kernels()[int(op)][int(device)][int(dtype)];
}
bool has_kernel(OpId op, DeviceType device, DType dtype) {
  return find_kernel(op, device, dtype) != nullptr;
}

}  // namespace mg
