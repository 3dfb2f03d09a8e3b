// The registry test (DESIGN §8): every op in ops/op_list.def has a rule, a backward rule exactly
// when it is differentiable, CPU kernels for the dtypes it must support, and at least one case in
// the op table; op names are unique and round-trip; cast policies can be overridden and reset.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

#include "op_cases.h"
#include "autograd/node.h"
#include "ops/dispatcher.h"
#include "ops/kernel_registry.h"
#include "ops/op_node.h"
#include "ops/op_rule.h"

namespace mg::optable {
namespace {

// The CPU kernel dtypes an op must have. Every op: f64 and f32 (the reference) and f16/bf16
// (emulated), DESIGN §1 — comparisons, argmax/argmin, where, masked_fill, gather, ... are keyed by
// their data input, so they need all four too. On top of that, what the public API promises or
// training code needs: casts, copies and fill_ work on every dtype; neg/abs/sign/relu/clamp take
// integers (ops/ops.h); integer labels are compared, summed, concatenated and indexed; a bool
// mask is summed. one_hot is keyed by its i64 index.
std::vector<DType> required_cpu_dtypes(OpId op) {
  using O = OpId;
  const std::vector<DType> floats{DType::F64, DType::F32, DType::F16, DType::BF16};
  auto with = [&floats](std::vector<DType> extra) {
    std::vector<DType> all = floats;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  switch (op) {
    case O::one_hot:
      return {DType::I64};
    case O::fill: case O::clone: case O::to_dtype: case O::to_device: case O::copy:
      return with({DType::I64, DType::I32, DType::U8, DType::Bool});
    case O::neg: case O::abs: case O::sign: case O::relu: case O::clamp:
      return with({DType::I64, DType::I32});
    case O::eq: case O::ne: case O::lt: case O::le: case O::gt: case O::ge:
    case O::add: case O::sub: case O::mul: case O::where: case O::cat: case O::index_select:
    case O::gather: case O::masked_fill: case O::argmax: case O::argmin: case O::amax: case O::amin:
      return with({DType::I64});
    case O::sum:
      return with({DType::I64, DType::Bool});
    default:
      return floats;
  }
}

bool is_view_op(OpId op) {
  return op == OpId::view || op == OpId::permute || op == OpId::expand || op == OpId::slice;
}

}  // namespace

TEST_CASE("registry: every op has a rule, a backward exactly when differentiable, and CPU kernels",
          "[ops][registry]") {
  init();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    const OpDesc& desc = op_desc(op);
    const OpRule& rule = op_rule(op);
    INFO("op " << desc.name);
    CHECK(has_op_rule(op));
    if (desc.differentiable) {
      CHECK(rule.backward != nullptr);
    } else {
      CHECK(rule.backward == nullptr);
    }
    if (is_view_op(op)) {
      // View ops alias their input: a view fn and no kernel.
      CHECK(rule.view != nullptr);
      CHECK(rule.infer == nullptr);
      for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
        CHECK_FALSE(has_kernel(op, DeviceType::CPU, t));
      }
      continue;
    }
    CHECK(rule.view == nullptr);
    CHECK(rule.infer != nullptr);
    for (DType t : required_cpu_dtypes(op)) {
      INFO("dtype " << dtype_name(t));
      CHECK(has_kernel(op, DeviceType::CPU, t));
    }
  }
}

TEST_CASE("registry: every op has a case in the op table, and a gradient case when differentiable",
          "[ops][registry]") {
  std::map<OpId, int> cases, grad_cases;
  std::set<std::string> names;
  for (const OpCase& c : all_op_cases()) {
    INFO("case " << c.name);
    CHECK(names.insert(c.name).second);  // case names are unique
    CHECK(c.make_inputs);
    CHECK(c.run);
    // A case's flags agree with the op list.
    if (!op_desc(c.op).differentiable) CHECK(c.not_differentiable);
    CHECK(c.not_differentiable == c.grad_inputs.empty());
    // The case name starts with its op's name ("add/broadcast" tests add).
    CHECK(c.name.rfind(op_name(c.op), 0) == 0);
    ++cases[c.op];
    if (!c.not_differentiable) ++grad_cases[c.op];
  }
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    INFO("op " << op_name(op));
    CHECK(cases[op] >= 1);
    if (op_desc(op).differentiable) CHECK(grad_cases[op] >= 1);
  }
}

TEST_CASE("registry: each differentiable case records the op it names", "[ops][registry]") {
  // Walks the autograd graph of run() and checks that the case's op is among the recorded
  // nodes, so a case cannot silently test another op. (Non-differentiable ops record no node.)
  int checked = 0;
  for (const OpCase& c : all_op_cases()) {
    if (c.not_differentiable) continue;
    std::set<OpId> ops;
    std::string err;
    try {
      Tensors in = c.make_inputs(DType::F64);
      for (int i : c.grad_inputs) in[i].requires_grad_();
      const Tensor y = c.run(in);
      std::vector<std::shared_ptr<autograd::Node>> todo{y.grad_fn()};
      std::set<autograd::Node*> visited;
      while (!todo.empty()) {
        const std::shared_ptr<autograd::Node> n = todo.back();
        todo.pop_back();
        if (!n || !visited.insert(n.get()).second) continue;
        if (const auto* op_node = dynamic_cast<const OpNode*>(n.get())) ops.insert(op_node->op());
        for (const autograd::Edge& e : n->next_edges) todo.push_back(e.node);
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
    INFO("case " << c.name << (err.empty() ? "" : " threw: " + err));
    CHECK(err.empty());
    CHECK(ops.count(c.op) == 1);
    ++checked;
  }
  CHECK(checked > 100);
}

TEST_CASE("registry: op names are unique and op_from_name round-trips", "[ops][registry]") {
  std::set<std::string> names;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    const std::string name = op_name(op);
    INFO("op " << name);
    CHECK(!name.empty());
    CHECK(names.insert(name).second);
    CHECK(op_from_name(name) == op);
    const int arity = op_desc(op).arity;
    CHECK((arity == -1 || (arity >= 1 && arity <= 3)));
  }
  CHECK(int(names.size()) == kNumOps);
  CHECK(std::string(op_name(OpId::matmul)) == "matmul");
  try {
    op_from_name("no_such_op");
    FAIL("op_from_name accepted an unknown name");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("no_such_op"));
  }
}

TEST_CASE("registry: cast policies can be overridden, reset and parsed", "[ops][registry]") {
  reset_policies();
  CHECK(op_policy(OpId::matmul) == CastPolicy::Lower);
  CHECK(op_policy(OpId::exp) == CastPolicy::Fp32);
  CHECK(op_policy(OpId::add) == CastPolicy::Promote);
  CHECK(op_policy(OpId::relu) == CastPolicy::Keep);
  // Every op starts at its default.
  for (int i = 0; i < kNumOps; ++i) CHECK(op_policy(OpId(i)) == op_desc(OpId(i)).default_policy);

  set_policy("exp", CastPolicy::Lower);
  set_policy(OpId::add, CastPolicy::Keep);
  CHECK(op_policy(OpId::exp) == CastPolicy::Lower);
  CHECK(op_policy(OpId::add) == CastPolicy::Keep);
  CHECK(op_desc(OpId::exp).default_policy == CastPolicy::Fp32);  // the default is untouched
  CHECK(op_policy(OpId::log) == CastPolicy::Fp32);               // other ops are untouched
  reset_policies();
  CHECK(op_policy(OpId::exp) == CastPolicy::Fp32);
  CHECK(op_policy(OpId::add) == CastPolicy::Promote);

  try {
    set_policy("no_such_op", CastPolicy::Fp32);
    FAIL("set_policy accepted an unknown op");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("no_such_op"));
  }

  for (CastPolicy p : {CastPolicy::Lower, CastPolicy::Fp32, CastPolicy::Promote, CastPolicy::Keep,
                       CastPolicy::Banned}) {
    CHECK(policy_from_name(policy_name(p)) == p);
  }
  CHECK(std::string(policy_name(CastPolicy::Fp32)) == "fp32");
  CHECK(policy_from_name("lower") == CastPolicy::Lower);
  try {
    policy_from_name("half");
    FAIL("policy_from_name accepted an unknown name");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Matchers::Contains("unknown cast policy \"half\""));
    CHECK_THAT(msg, Catch::Matchers::Contains("lower, fp32, promote, keep or banned"));
  }
}

}  // namespace mg::optable
