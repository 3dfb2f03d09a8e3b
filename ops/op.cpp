#include "mixgrad/ops/op.h"

#include <array>
#include <atomic>

#include "mixgrad/core/error.h"

namespace mg {
namespace {

constexpr OpDesc kOpDescs[] = {
#define MG_OP(name, arity, policy, diff) {#name, arity, CastPolicy::policy, diff},
#include "mixgrad/ops/op_list.def"
#undef MG_OP
};
static_assert(sizeof(kOpDescs) / sizeof(kOpDescs[0]) == std::size_t(kNumOps),
              "op table and OpId enum must have one entry per op");

std::array<std::atomic<CastPolicy>, kNumOps>& policies() {
  static std::array<std::atomic<CastPolicy>, kNumOps> table;
  static const bool initialised = [] {
    for (int i = 0; i < kNumOps; ++i) table[i].store(kOpDescs[i].default_policy);
    return true;
  }();
  (void)initialised;
  return table;
}

}  // namespace

const char* policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::Lower: return "lower";
    case CastPolicy::Fp32: return "fp32";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::Keep: return "keep";
    case CastPolicy::Banned: return "banned";
  }
  return "?";
}

CastPolicy policy_from_name(const std::string& name) {
  for (CastPolicy p : {CastPolicy::Lower, CastPolicy::Fp32, CastPolicy::Promote, CastPolicy::Keep,
                       CastPolicy::Banned}) {
    if (name == policy_name(p)) return p;
  }
  MG_THROW(Error, "set_policy: unknown cast policy \"", name,
           "\"; expected lower, fp32, promote, keep or banned");
}

const OpDesc& op_desc(OpId op) {
  MG_ASSERT(int(op) < kNumOps, "bad OpId ", int(op));
  return kOpDescs[int(op)];
}

OpId op_from_name(const std::string& name) {
  for (int i = 0; i < kNumOps; ++i) {
    if (name == kOpDescs[i].name) return OpId(i);
  }
  MG_THROW(Error, "op: unknown op \"", name, "\"\n  hint: docs/ops.md lists every op");
}

CastPolicy op_policy(OpId op) { return policies()[int(op)].load(std::memory_order_relaxed); }

namespace {
// Which ops carry a user override (so a second, different override is caught as a conflict).
std::array<std::atomic<bool>, kNumOps>& overridden() {
  static std::array<std::atomic<bool>, kNumOps> table{};
  return table;
}
}  // namespace

void set_policy(OpId op, CastPolicy policy) {
  // Casts and views are how the autocast hook itself works and how aliasing is kept: a cast
  // policy on to_dtype would recurse without end (the hook's cast dispatches to_dtype), and a view
  // of a cast copy would no longer write its base. Backward ops get their dtypes from the forward.
  // batch_norm updates its running statistics in place: a cast copy of them would be updated
  // instead, and the module's statistics would silently never move.
  const std::string name = op_name(op);
  const bool structural = op == OpId::to_dtype || op == OpId::to_device || op == OpId::copy || op == OpId::view ||
                          op == OpId::permute || op == OpId::expand || op == OpId::slice || op == OpId::batch_norm ||
                          (name.size() > 9 && name.ends_with("_backward"));
  MG_CHECK(!structural || policy == kOpDescs[int(op)].default_policy, Error, "set_policy: ", name,
           " is a cast, a view, a backward op or an op that updates its inputs in place, whose policy cannot "
           "change (it stays ", policy_name(kOpDescs[int(op)].default_policy), ")");
  const CastPolicy current = op_policy(op);
  // Two registrations that disagree (Apex: register_half_function and register_float_function
  // on one function) would silently depend on call order; refuse the second.
  MG_CHECK(!overridden()[int(op)].load() || current == policy, Error, "set_policy: conflicting registration for ",
           op_name(op), ": it is already overridden to ", policy_name(current), ", now asked for ",
           policy_name(policy), "\n  hint: call reset_policy(\"", op_name(op), "\") first to change it on purpose");
  policies()[int(op)].store(policy);
  overridden()[int(op)].store(true);
}
void set_policy(const std::string& op, CastPolicy policy) { set_policy(op_from_name(op), policy); }

void reset_policy(OpId op) {
  policies()[int(op)].store(kOpDescs[int(op)].default_policy);
  overridden()[int(op)].store(false);
}
void reset_policy(const std::string& op) { reset_policy(op_from_name(op)); }

void reset_policies() {
  for (int i = 0; i < kNumOps; ++i) reset_policy(OpId(i));
}

}  // namespace mg
