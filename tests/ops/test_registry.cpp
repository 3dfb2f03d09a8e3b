// The registry test (DESIGN §8): every op in ops/op_list.def has a rule, a backward rule exactly
// when it is differentiable, CPU kernels for the dtypes it must support, and at least one case in
// the op table; op names are unique and round-trip; cast policies can be overridden and reset.
// The CUDA rule: in a CUDA build every op has CUDA kernels for f32, f16 and bf16 unless
// ops/cuda_gaps.def marks the gap with a reason, no marked gap has been filled (no stale reason),
// and calling a gap is a NotImplementedError that quotes the reason. Kernel registration needs no
// GPU, so these run on every machine.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

#include "op_cases.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "cuda/cuda.h"
#include "cuda/cuda_test_util.h"
#include "ops/dispatcher.h"
#include "ops/cuda_gaps.h"
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
    case O::one_hot: case O::nonzero_from_prefix:  // i64 in (indices, a prefix count)
      return {DType::I64};
    case O::fill: case O::clone: case O::to_dtype: case O::to_device: case O::copy:
      return with({DType::I64, DType::I32, DType::U8, DType::Bool});
    case O::neg: case O::abs: case O::sign: case O::relu: case O::clamp:
      return with({DType::I64, DType::I32, DType::U8});
    case O::bitwise_and: case O::bitwise_or: case O::bitwise_xor: case O::bitwise_not:
      return {DType::I64, DType::I32, DType::U8, DType::Bool};
    case O::bitwise_left_shift: case O::bitwise_right_shift:
      return {DType::I64, DType::I32, DType::U8};
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

// ---- the CUDA rule (DESIGN §1): f32/f16/bf16 CUDA kernels for every op, or a marked gap ----

namespace mg::optable {
namespace {

// The dtypes an op must have on CUDA: those of f32, f16 and bf16 it must have on the CPU (one_hot
// is keyed by its integer index, so none of them).
std::vector<DType> required_cuda_dtypes(OpId op) {
  std::vector<DType> out;
  for (DType t : required_cpu_dtypes(op)) {
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) out.push_back(t);
  }
  return out;
}

// x as a cuda:0 tensor: on a machine with a GPU a real copy (layout kept), without one a stand-in
// whose storage is x's host memory tagged cuda:0. A stand-in is never read: it only reaches the
// dispatcher's kernel lookup, which fails for a gap before anything is allocated or launched.
Tensor on_cuda_or_stand_in(const Tensor& x) {
  if (cuda::is_available()) return test::to_gpu_keep_layout(x);
  const std::shared_ptr<Storage> host = x.impl()->storage;
  auto tagged = std::make_shared<Storage>(host->data(), host->nbytes(), Device::cuda(0), [host](void*) {});
  return make_tensor(tagged, x.shape(), x.strides(), x.offset(), x.dtype());
}

}  // namespace

TEST_CASE("registry: ops/cuda_gaps.def marks each op once, with a reason and floating dtypes", "[ops][registry]") {
  std::set<OpId> seen;
  for (const CudaGap& g : cuda_gaps()) {
    INFO("gap " << op_name(g.op));
    CHECK(seen.insert(g.op).second);  // one line per op
    CHECK(g.reason != nullptr);
    CHECK(std::string(g.reason).size() >= 10);  // a reason, not a placeholder
    CHECK_FALSE(is_view_op(g.op));             // views have no kernel on any device: nothing to mark
    CHECK_FALSE(g.dtypes.empty());
    std::set<DType> dts;
    for (DType t : g.dtypes) {
      CHECK(dts.insert(t).second);
      CHECK((t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16));
      CHECK(cuda_gap_reason(g.op, t) == g.reason);
    }
    CHECK(find_cuda_gap(g.op) == &g);
    CHECK(cuda_gap_reason(g.op) == g.reason);
  }
  // An op without a line has no reason for any dtype.
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    if (seen.count(op)) continue;
    INFO("op " << op_name(op));
    CHECK(find_cuda_gap(op) == nullptr);
    CHECK(cuda_gap_reason(op) == nullptr);
    CHECK(cuda_gap_reason(op, DType::F16) == nullptr);
  }
}

TEST_CASE("registry: every op has CUDA kernels for f32, f16 and bf16 unless ops/cuda_gaps.def marks the gap, "
          "and no marked gap has a kernel",
          "[ops][registry][cuda]") {
  init();
  if (!cuda::built_with_cuda()) {
    // A CPU-only build registers no CUDA kernel (tests/cuda/test_cuda_registry.cpp checks it):
    // every op would be a gap, and the rule is about the backend's coverage.
    WARN("skipped: mixgrad was built without the CUDA backend");
    return;
  }
  int full = 0, marked = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = OpId(i);
    INFO("op " << op_name(op));
    if (is_view_op(op)) {
      CHECK(find_cuda_gap(op) == nullptr);
      continue;
    }
    bool complete = true;
    for (DType t : required_cuda_dtypes(op)) {
      if (has_kernel(op, DeviceType::CUDA, t)) continue;
      complete = false;
      INFO("dtype " << dtype_name(t) << ": no CUDA kernel and no line in ops/cuda_gaps.def");
      CHECK(cuda_gap_reason(op, t) != nullptr);
    }
    full += complete;
  }
  // Stale reasons: a marked dtype that has a kernel after all (delete it from ops/cuda_gaps.def).
  for (const CudaGap& g : cuda_gaps()) {
    for (DType t : g.dtypes) {
      INFO("op " << op_name(g.op) << " dtype " << dtype_name(t)
                 << ": ops/cuda_gaps.def marks a gap but a CUDA kernel is registered");
      CHECK_FALSE(has_kernel(g.op, DeviceType::CUDA, t));
      ++marked;
    }
  }
  std::string gaps;
  for (const CudaGap& g : cuda_gaps()) gaps += std::string(gaps.empty() ? "" : ", ") + op_name(g.op);
  WARN("ops with CUDA f32/f16/bf16 kernels: " << full << "; marked gaps (" << marked
                                              << " op-dtype pairs): " << (gaps.empty() ? "none" : gaps));
  CHECK(full >= 90);  // the backend covers nearly every op (95 of the 99 with kernels when this was written)
}

TEST_CASE("registry: a missing CUDA kernel is a NotImplementedError quoting the marked gap, never a CPU fallback",
          "[ops][registry][cuda]") {
  init();
  if (!cuda::built_with_cuda()) {
    WARN("skipped: mixgrad was built without the CUDA backend");
    return;
  }
  // The message itself, whether or not a gap is marked today: the reason is quoted on CUDA only.
  const std::string with_reason =
      missing_kernel_message(OpId::conv2d, "cuda:0", DeviceType::CUDA, DType::F16, "a reason of ten letters");
  CHECK(with_reason == "conv2d: no cuda:0 kernel for f16 (a known gap of the CUDA backend: a reason of ten letters)"
                       "\n  hint: the CUDA backend has no such kernel yet; compute this op on the CPU (.to(Device::cpu()))");
  CHECK(missing_kernel_message(OpId::exp, "cuda:1", DeviceType::CUDA, DType::BF16, nullptr) ==
        "exp: no cuda:1 kernel for bf16\n  hint: the CUDA backend has no such kernel yet; compute this op on the CPU "
        "(.to(Device::cpu()))");
  CHECK(missing_kernel_message(OpId::exp, "cpu", DeviceType::CPU, DType::BF16, "ignored") == "exp: no cpu kernel for bf16");
  // Then every marked gap through the dispatcher (none when every op has its CUDA kernels).
  int checked = 0;
  for (const OpCase& c : all_op_cases()) {
    const char* reason = cuda_gap_reason(c.op);
    if (!reason) continue;
    for (DType t : find_cuda_gap(c.op)->dtypes) {
      INFO("case " << c.name << " dtype " << dtype_name(t));
      const Tensors host = c.make_inputs(t);
      Tensors dev;
      for (const Tensor& x : host) dev.push_back(on_cuda_or_stand_in(x));
      NoGradGuard no_grad;
      std::string msg;
      try {
        const Tensor y = c.run(dev);
        FAIL_CHECK("ran on " << y.device().str() << " although no CUDA kernel is registered");
      } catch (const NotImplementedError& e) {
        msg = e.what();
      }
      CHECK_THAT(msg, Catch::Matchers::StartsWith(std::string(op_name(c.op)) + ": no cuda:0 kernel for " +
                                                  dtype_name(t)));
      CHECK_THAT(msg, Catch::Matchers::Contains(std::string("(a known gap of the CUDA backend: ") + reason + ")"));
      CHECK_THAT(msg, Catch::Matchers::Contains("hint: the CUDA backend has no such kernel yet"));
      ++checked;
    }
  }
  CHECK(checked >= int(cuda_gaps().size()));  // every marked op has a case (the table covers every op)
}

}  // namespace mg::optable
