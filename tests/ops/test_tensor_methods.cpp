// Tensor's method forms (x.exp(), x.sum({1}, true), x.relu_(), ...) against the free functions:
// for every method, in f64/f32/f16/bf16 (and i64 where the op takes integers), the same op
// events reach the dispatcher (recorded with the op observer) and the results are bit-identical
// in values, dtype and shape; in-place forms equal the out-of-place free function; gradients
// through methods equal the free functions' bit for bit; the calls of issue 13 with golden
// values; and errors that name the op.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/op_observer.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using namespace mg;
using mg::test::values;

namespace {

// ---- recording the op events that reach the dispatcher ----
std::vector<std::string> g_trace;
void record_op(const OpEvent& e) {
  if (!e.backward) g_trace.push_back(std::string(e.op) + (e.inplace ? "_" : ""));
}
// Runs f with the observer installed and returns the ops it dispatched, in order.
template <typename F>
std::vector<std::string> trace_of(F&& f) {
  g_trace.clear();
  const OpObserver previous = set_op_observer(record_op);
  try {
    f();
  } catch (...) {
    set_op_observer(previous);
    throw;
  }
  set_op_observer(previous);
  return g_trace;
}

// Same dtype, same shape and the same bytes (so NaNs and signed zeros count too).
void require_identical(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  INFO("got " << describe(got) << ", want " << describe(want));
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  NoGradGuard no_grad;
  const Tensor g = contiguous(got), w = contiguous(want);
  REQUIRE(std::memcmp(g.data_ptr(), w.data_ptr(), std::size_t(g.numel()) * g.element_size()) == 0);
}
void require_identical(const Tensors& got, const Tensors& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) require_identical(got[i], want[i]);
}

// The operands every case draws from, in one dtype.
struct Inputs {
  Tensor x;     // [3, 4] values in (-2, 2)
  Tensor y;     // [3, 4] values in (-2, 2)
  Tensor pos;   // [3, 4] values in (0.25, 2.25): log, sqrt, rsqrt, pow with a fractional exponent
  Tensor row;   // [4] broadcast operand
  Tensor w;     // [4, 5]
  Tensor c;     // [3, 5] the added matrix of addmm
  Tensor a3;    // [2, 3, 4]
  Tensor b3;    // [2, 4, 5]
  Tensor c3;    // [2, 3, 5]
  Tensor mask;  // [3, 4] bool
  Tensor idx;   // [2] i64 in [0, 3)
  Tensor gidx;  // [3, 2] i64 in [0, 4) (gather / scatter_add along dim 1)
  Tensor src;   // [3, 2] scatter_add source
};

Inputs make_inputs(DType dtype) {
  manual_seed(1234);
  auto uniform = [&](const Shape& s, double lo, double hi) { return to(rand(s, {.dtype = DType::F64}) * (hi - lo) + lo, dtype); };
  Inputs in;
  in.x = uniform({3, 4}, -2, 2);
  in.y = uniform({3, 4}, -2, 2);
  in.pos = uniform({3, 4}, 0.25, 2.25);
  in.row = uniform({4}, -2, 2);
  in.w = uniform({4, 5}, -1, 1);
  in.c = uniform({3, 5}, -1, 1);
  in.a3 = uniform({2, 3, 4}, -1, 1);
  in.b3 = uniform({2, 4, 5}, -1, 1);
  in.c3 = uniform({2, 3, 5}, -1, 1);
  in.mask = gt(rand({3, 4}), scalar_tensor(0.5));
  in.idx = from_vector<int64_t>({2, 0}, {2});
  in.gidx = from_vector<int64_t>({3, 0, 1, 1, 2, 0}, {3, 2});
  in.src = uniform({3, 2}, -1, 1);
  return in;
}

using Fn = std::function<Tensors(const Inputs&)>;
struct Case {
  const char* name;
  Fn method;
  Fn free;
};
Tensors one(const Tensor& t) { return {t}; }
Tensors two(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }

// Every out-of-place method with its free function. Cases marked floating-only are skipped for
// integer dtypes by the caller.
std::vector<Case> floating_cases() {
  return {
      // views, copies and casts
      {"view", [](const Inputs& i) { return one(i.x.view({4, 3})); }, [](const Inputs& i) { return one(view(i.x, {4, 3})); }},
      {"reshape", [](const Inputs& i) { return one(i.x.t().reshape({2, -1})); },
       [](const Inputs& i) { return one(reshape(transpose(i.x, 0, 1), {2, -1})); }},
      {"permute", [](const Inputs& i) { return one(i.a3.permute({2, 0, 1})); }, [](const Inputs& i) { return one(permute(i.a3, {2, 0, 1})); }},
      {"transpose", [](const Inputs& i) { return one(i.a3.transpose(0, -1)); }, [](const Inputs& i) { return one(transpose(i.a3, 0, -1)); }},
      {"t", [](const Inputs& i) { return one(i.x.t()); }, [](const Inputs& i) { return one(transpose(i.x, 0, 1)); }},
      {"narrow", [](const Inputs& i) { return one(i.x.narrow(1, 1, 2)); }, [](const Inputs& i) { return one(narrow(i.x, 1, 1, 2)); }},
      {"slice", [](const Inputs& i) { return one(i.x.slice(1, 0, 4, 2)); }, [](const Inputs& i) { return one(slice(i.x, 1, 0, 4, 2)); }},
      {"select", [](const Inputs& i) { return one(i.x.select(0, -1)); }, [](const Inputs& i) { return one(select(i.x, 0, -1)); }},
      {"expand", [](const Inputs& i) { return one(i.row.expand({3, 4})); }, [](const Inputs& i) { return one(expand(i.row, {3, 4})); }},
      {"squeeze", [](const Inputs& i) { return one(i.x.unsqueeze(0).squeeze()); },
       [](const Inputs& i) { return one(squeeze(unsqueeze(i.x, 0))); }},
      {"squeeze dim", [](const Inputs& i) { return one(i.x.unsqueeze(1).squeeze(1)); },
       [](const Inputs& i) { return one(squeeze(unsqueeze(i.x, 1), 1)); }},
      {"flatten", [](const Inputs& i) { return one(i.a3.flatten(1)); }, [](const Inputs& i) { return one(flatten(i.a3, 1)); }},
      {"contiguous", [](const Inputs& i) { return one(i.x.t().contiguous()); },
       [](const Inputs& i) { return one(contiguous(transpose(i.x, 0, 1))); }},
      {"clone", [](const Inputs& i) { return one(i.x.clone()); }, [](const Inputs& i) { return one(clone(i.x)); }},
      {"to dtype", [](const Inputs& i) { return one(i.x.to(DType::I32)); }, [](const Inputs& i) { return one(to(i.x, DType::I32)); }},
      // arithmetic
      {"add", [](const Inputs& i) { return one(i.x.add(i.y)); }, [](const Inputs& i) { return one(add(i.x, i.y)); }},
      {"add alpha", [](const Inputs& i) { return one(i.x.add(i.row, 0.5)); }, [](const Inputs& i) { return one(add(i.x, i.row, 0.5)); }},
      {"add scalar", [](const Inputs& i) { return one(i.x.add(1.5)); }, [](const Inputs& i) { return one(i.x + 1.5); }},
      {"sub", [](const Inputs& i) { return one(i.x.sub(i.y, 2.0)); }, [](const Inputs& i) { return one(sub(i.x, i.y, 2.0)); }},
      {"sub scalar", [](const Inputs& i) { return one(i.x.sub(0.75)); }, [](const Inputs& i) { return one(i.x - 0.75); }},
      {"mul", [](const Inputs& i) { return one(i.x.mul(i.row)); }, [](const Inputs& i) { return one(mul(i.x, i.row)); }},
      {"mul scalar", [](const Inputs& i) { return one(i.x.mul(3.0)); }, [](const Inputs& i) { return one(i.x * 3.0); }},
      {"div", [](const Inputs& i) { return one(i.x.div(i.pos)); }, [](const Inputs& i) { return one(div(i.x, i.pos)); }},
      {"div scalar", [](const Inputs& i) { return one(i.x.div(3.0)); }, [](const Inputs& i) { return one(i.x / 3.0); }},
      {"neg", [](const Inputs& i) { return one(i.x.neg()); }, [](const Inputs& i) { return one(neg(i.x)); }},
      {"abs", [](const Inputs& i) { return one(i.x.abs()); }, [](const Inputs& i) { return one(abs(i.x)); }},
      {"sign", [](const Inputs& i) { return one(i.x.sign()); }, [](const Inputs& i) { return one(sign(i.x)); }},
      {"maximum", [](const Inputs& i) { return one(i.x.maximum(i.y)); }, [](const Inputs& i) { return one(maximum(i.x, i.y)); }},
      {"minimum", [](const Inputs& i) { return one(i.x.minimum(i.row)); }, [](const Inputs& i) { return one(minimum(i.x, i.row)); }},
      // unary math
      {"exp", [](const Inputs& i) { return one(i.x.exp()); }, [](const Inputs& i) { return one(exp(i.x)); }},
      {"log", [](const Inputs& i) { return one(i.pos.log()); }, [](const Inputs& i) { return one(log(i.pos)); }},
      {"log1p", [](const Inputs& i) { return one(i.pos.log1p()); }, [](const Inputs& i) { return one(log1p(i.pos)); }},
      {"expm1", [](const Inputs& i) { return one(i.x.expm1()); }, [](const Inputs& i) { return one(expm1(i.x)); }},
      {"sqrt", [](const Inputs& i) { return one(i.pos.sqrt()); }, [](const Inputs& i) { return one(sqrt(i.pos)); }},
      {"rsqrt", [](const Inputs& i) { return one(i.pos.rsqrt()); }, [](const Inputs& i) { return one(rsqrt(i.pos)); }},
      {"reciprocal", [](const Inputs& i) { return one(i.pos.reciprocal()); }, [](const Inputs& i) { return one(reciprocal(i.pos)); }},
      {"sin", [](const Inputs& i) { return one(i.x.sin()); }, [](const Inputs& i) { return one(sin(i.x)); }},
      {"cos", [](const Inputs& i) { return one(i.x.cos()); }, [](const Inputs& i) { return one(cos(i.x)); }},
      {"tanh", [](const Inputs& i) { return one(i.x.tanh()); }, [](const Inputs& i) { return one(tanh(i.x)); }},
      {"sigmoid", [](const Inputs& i) { return one(i.x.sigmoid()); }, [](const Inputs& i) { return one(sigmoid(i.x)); }},
      {"relu", [](const Inputs& i) { return one(i.x.relu()); }, [](const Inputs& i) { return one(relu(i.x)); }},
      {"gelu", [](const Inputs& i) { return one(i.x.gelu()); }, [](const Inputs& i) { return one(gelu(i.x)); }},
      {"gelu tanh", [](const Inputs& i) { return one(i.x.gelu(GeluApprox::Tanh)); },
       [](const Inputs& i) { return one(gelu(i.x, GeluApprox::Tanh)); }},
      {"silu", [](const Inputs& i) { return one(i.x.silu()); }, [](const Inputs& i) { return one(silu(i.x)); }},
      {"softplus", [](const Inputs& i) { return one(i.x.softplus()); }, [](const Inputs& i) { return one(softplus(i.x)); }},
      {"softplus beta", [](const Inputs& i) { return one(i.x.softplus(2.0, 1.0)); },
       [](const Inputs& i) { return one(softplus(i.x, 2.0, 1.0)); }},
      {"erf", [](const Inputs& i) { return one(i.x.erf()); }, [](const Inputs& i) { return one(erf(i.x)); }},
      {"pow scalar", [](const Inputs& i) { return one(i.pos.pow(1.5)); }, [](const Inputs& i) { return one(pow(i.pos, 1.5)); }},
      {"pow tensor", [](const Inputs& i) { return one(i.pos.pow(i.y)); }, [](const Inputs& i) { return one(pow(i.pos, i.y)); }},
      {"clamp", [](const Inputs& i) { return one(i.x.clamp(-0.5, 0.75)); }, [](const Inputs& i) { return one(clamp(i.x, -0.5, 0.75)); }},
      {"clamp_min", [](const Inputs& i) { return one(i.x.clamp_min(0.25)); }, [](const Inputs& i) { return one(clamp_min(i.x, 0.25)); }},
      {"clamp_max", [](const Inputs& i) { return one(i.x.clamp_max(0.25)); }, [](const Inputs& i) { return one(clamp_max(i.x, 0.25)); }},
      // comparisons (a double compares as scalar_like, like the operators)
      {"eq", [](const Inputs& i) { return one(i.x.eq(i.x.abs())); }, [](const Inputs& i) { return one(eq(i.x, abs(i.x))); }},
      {"eq scalar", [](const Inputs& i) { return one(i.x.sign().eq(1.0)); },
       [](const Inputs& i) { return one(eq(sign(i.x), scalar_like(1.0, i.x))); }},
      {"ne", [](const Inputs& i) { return one(i.x.ne(i.y)); }, [](const Inputs& i) { return one(ne(i.x, i.y)); }},
      {"ne scalar", [](const Inputs& i) { return one(i.x.sign().ne(-1.0)); },
       [](const Inputs& i) { return one(ne(sign(i.x), scalar_like(-1.0, i.x))); }},
      {"lt", [](const Inputs& i) { return one(i.x.lt(i.row)); }, [](const Inputs& i) { return one(lt(i.x, i.row)); }},
      {"lt scalar", [](const Inputs& i) { return one(i.x.lt(0.3)); }, [](const Inputs& i) { return one(lt(i.x, scalar_like(0.3, i.x))); }},
      {"le", [](const Inputs& i) { return one(i.x.le(i.y)); }, [](const Inputs& i) { return one(le(i.x, i.y)); }},
      {"le scalar", [](const Inputs& i) { return one(i.x.le(-0.3)); }, [](const Inputs& i) { return one(le(i.x, scalar_like(-0.3, i.x))); }},
      {"gt", [](const Inputs& i) { return one(i.x.gt(i.y)); }, [](const Inputs& i) { return one(gt(i.x, i.y)); }},
      {"gt scalar", [](const Inputs& i) { return one(i.x.gt(0.1)); }, [](const Inputs& i) { return one(gt(i.x, scalar_like(0.1, i.x))); }},
      {"ge", [](const Inputs& i) { return one(i.x.ge(i.row)); }, [](const Inputs& i) { return one(ge(i.x, i.row)); }},
      {"ge scalar", [](const Inputs& i) { return one(i.x.ge(0.1)); }, [](const Inputs& i) { return one(ge(i.x, scalar_like(0.1, i.x))); }},
      {"where", [](const Inputs& i) { return one(i.x.where(i.mask, i.y)); }, [](const Inputs& i) { return one(where(i.mask, i.x, i.y)); }},
      // reductions
      {"sum all", [](const Inputs& i) { return one(i.x.sum()); }, [](const Inputs& i) { return one(sum(i.x)); }},
      {"sum dims keepdim", [](const Inputs& i) { return one(i.a3.sum({0, 2}, true)); },
       [](const Inputs& i) { return one(sum(i.a3, {0, 2}, true)); }},
      {"mean all", [](const Inputs& i) { return one(i.x.mean()); }, [](const Inputs& i) { return one(mean(i.x)); }},
      {"mean dim", [](const Inputs& i) { return one(i.x.mean({-1})); }, [](const Inputs& i) { return one(mean(i.x, {-1})); }},
      {"prod", [](const Inputs& i) { return one(i.x.prod({1}, true)); }, [](const Inputs& i) { return one(prod(i.x, {1}, true)); }},
      {"amax", [](const Inputs& i) { return one(i.a3.amax({1})); }, [](const Inputs& i) { return one(amax(i.a3, {1})); }},
      {"amin", [](const Inputs& i) { return one(i.a3.amin({2}, true)); }, [](const Inputs& i) { return one(amin(i.a3, {2}, true)); }},
      {"max all", [](const Inputs& i) { return one(i.x.max()); }, [](const Inputs& i) { return one(max(i.x)); }},
      {"min all", [](const Inputs& i) { return one(i.x.min()); }, [](const Inputs& i) { return one(min(i.x)); }},
      {"max dim", [](const Inputs& i) { return two(i.x.max(1)); }, [](const Inputs& i) { return two(max(i.x, 1)); }},
      {"min dim keepdim", [](const Inputs& i) { return two(i.x.min(0, true)); }, [](const Inputs& i) { return two(min(i.x, 0, true)); }},
      {"argmax", [](const Inputs& i) { return one(i.x.argmax(1)); }, [](const Inputs& i) { return one(argmax(i.x, 1)); }},
      {"argmin", [](const Inputs& i) { return one(i.x.argmin(0, true)); }, [](const Inputs& i) { return one(argmin(i.x, 0, true)); }},
      {"var", [](const Inputs& i) { return one(i.x.var()); }, [](const Inputs& i) { return one(var(i.x)); }},
      {"var dims", [](const Inputs& i) { return one(i.x.var({1}, 0.0, true)); }, [](const Inputs& i) { return one(var(i.x, {1}, 0.0, true)); }},
      {"std", [](const Inputs& i) { return one(i.x.std({0})); }, [](const Inputs& i) { return one(mg::std(i.x, {0})); }},
      {"norm", [](const Inputs& i) { return one(i.x.norm()); }, [](const Inputs& i) { return one(norm(i.x)); }},
      {"norm p dims", [](const Inputs& i) { return one(i.x.norm(1.0, {1}, true)); },
       [](const Inputs& i) { return one(norm(i.x, 1.0, {1}, true)); }},
      {"norm inf", [](const Inputs& i) { return one(i.x.norm(INFINITY, {0})); }, [](const Inputs& i) { return one(norm(i.x, INFINITY, {0})); }},
      {"logsumexp", [](const Inputs& i) { return one(i.x.logsumexp({1})); }, [](const Inputs& i) { return one(logsumexp(i.x, {1})); }},
      {"cumsum", [](const Inputs& i) { return one(i.x.cumsum(-1)); }, [](const Inputs& i) { return one(cumsum(i.x, -1)); }},
      // linear algebra
      {"matmul", [](const Inputs& i) { return one(i.x.matmul(i.w)); }, [](const Inputs& i) { return one(matmul(i.x, i.w)); }},
      {"matmul batched", [](const Inputs& i) { return one(i.a3.matmul(i.w)); }, [](const Inputs& i) { return one(matmul(i.a3, i.w)); }},
      {"mm", [](const Inputs& i) { return one(i.x.mm(i.w)); }, [](const Inputs& i) { return one(mm(i.x, i.w)); }},
      {"bmm", [](const Inputs& i) { return one(i.a3.bmm(i.b3)); }, [](const Inputs& i) { return one(bmm(i.a3, i.b3)); }},
      {"addmm", [](const Inputs& i) { return one(i.c.addmm(i.x, i.w, 0.5, 2.0)); },
       [](const Inputs& i) { return one(addmm(i.c, i.x, i.w, 0.5, 2.0)); }},
      {"baddbmm", [](const Inputs& i) { return one(i.c3.baddbmm(i.a3, i.b3)); },
       [](const Inputs& i) { return one(baddbmm(i.c3, i.a3, i.b3)); }},
      // softmax family
      {"softmax", [](const Inputs& i) { return one(i.x.softmax(-1)); }, [](const Inputs& i) { return one(softmax(i.x, -1)); }},
      {"log_softmax", [](const Inputs& i) { return one(i.x.log_softmax(0)); }, [](const Inputs& i) { return one(log_softmax(i.x, 0)); }},
      // indexing and splitting
      {"masked_fill", [](const Inputs& i) { return one(i.x.masked_fill(i.mask, -7.0)); },
       [](const Inputs& i) { return one(masked_fill(i.x, i.mask, -7.0)); }},
      {"index_select", [](const Inputs& i) { return one(i.x.index_select(0, i.idx)); },
       [](const Inputs& i) { return one(index_select(i.x, 0, i.idx)); }},
      {"gather", [](const Inputs& i) { return one(i.x.gather(1, i.gidx)); }, [](const Inputs& i) { return one(gather(i.x, 1, i.gidx)); }},
      {"scatter_add", [](const Inputs& i) { return one(i.x.scatter_add(1, i.gidx, i.src)); },
       [](const Inputs& i) { return one(scatter_add(i.x, 1, i.gidx, i.src)); }},
      {"split size", [](const Inputs& i) { return i.x.split(3, 1); }, [](const Inputs& i) { return split(i.x, 3, 1); }},
      {"split sizes", [](const Inputs& i) { return i.x.split(std::vector<int64_t>{1, 2}); },
       [](const Inputs& i) { return split(i.x, std::vector<int64_t>{1, 2}); }},
      {"chunk", [](const Inputs& i) { return i.x.chunk(2, -1); }, [](const Inputs& i) { return chunk(i.x, 2, -1); }},
  };
}

// Methods whose ops take integer tensors, checked on i64 operands.
std::vector<Case> integer_cases() {
  return {
      {"add", [](const Inputs& i) { return one(i.x.add(i.y, 2.0)); }, [](const Inputs& i) { return one(add(i.x, i.y, 2.0)); }},
      {"mul scalar", [](const Inputs& i) { return one(i.x.mul(3.0)); }, [](const Inputs& i) { return one(i.x * 3.0); }},
      {"div", [](const Inputs& i) { return one(i.x.div(i.y.abs().add(1.0))); },
       [](const Inputs& i) { return one(div(i.x, abs(i.y) + 1.0)); }},
      {"neg", [](const Inputs& i) { return one(i.x.neg()); }, [](const Inputs& i) { return one(neg(i.x)); }},
      {"abs", [](const Inputs& i) { return one(i.x.abs()); }, [](const Inputs& i) { return one(abs(i.x)); }},
      {"relu", [](const Inputs& i) { return one(i.x.relu()); }, [](const Inputs& i) { return one(relu(i.x)); }},
      {"clamp", [](const Inputs& i) { return one(i.x.clamp(-1, 1)); }, [](const Inputs& i) { return one(clamp(i.x, -1, 1)); }},
      // a non-whole double against an integer tensor compares in f32 (scalar_like), 0.5 < 1
      {"lt fractional", [](const Inputs& i) { return one(i.x.lt(0.5)); }, [](const Inputs& i) { return one(lt(i.x, scalar_like(0.5, i.x))); }},
      {"eq", [](const Inputs& i) { return one(i.x.eq(i.y)); }, [](const Inputs& i) { return one(eq(i.x, i.y)); }},
      {"sum dim", [](const Inputs& i) { return one(i.x.sum({1})); }, [](const Inputs& i) { return one(sum(i.x, {1})); }},
      {"amax", [](const Inputs& i) { return one(i.x.amax({0}, true)); }, [](const Inputs& i) { return one(amax(i.x, {0}, true)); }},
      {"max dim", [](const Inputs& i) { return two(i.x.max(1, true)); }, [](const Inputs& i) { return two(max(i.x, 1, true)); }},
      {"argmin", [](const Inputs& i) { return one(i.x.argmin(1)); }, [](const Inputs& i) { return one(argmin(i.x, 1)); }},
      {"index_select", [](const Inputs& i) { return one(i.x.index_select(0, i.idx)); },
       [](const Inputs& i) { return one(index_select(i.x, 0, i.idx)); }},
  };
}

void check_cases(const std::vector<Case>& cases, const Inputs& in) {
  for (const Case& c : cases) {
    INFO("method " << c.name);
    Tensors got, want;
    const std::vector<std::string> method_ops = trace_of([&] { got = c.method(in); });
    const std::vector<std::string> free_ops = trace_of([&] { want = c.free(in); });
    REQUIRE(!free_ops.empty());
    CHECK(method_ops == free_ops);
    require_identical(got, want);
  }
}

// The in-place methods: the method name, the method applied to a clone, and the out-of-place
// free function it must equal.
struct InplaceCase {
  const char* name;
  const char* op;  // the op the dispatcher must see, in place
  std::function<void(Tensor&, const Inputs&)> method;
  std::function<Tensor(const Tensor&, const Inputs&)> free;
  bool positive = false;  // needs a positive operand
};
std::vector<InplaceCase> inplace_cases() {
  return {
      {"neg_", "neg", [](Tensor& t, const Inputs&) { t.neg_(); }, [](const Tensor& t, const Inputs&) { return neg(t); }},
      {"abs_", "abs", [](Tensor& t, const Inputs&) { t.abs_(); }, [](const Tensor& t, const Inputs&) { return abs(t); }},
      {"sign_", "sign", [](Tensor& t, const Inputs&) { t.sign_(); }, [](const Tensor& t, const Inputs&) { return sign(t); }},
      {"exp_", "exp", [](Tensor& t, const Inputs&) { t.exp_(); }, [](const Tensor& t, const Inputs&) { return exp(t); }},
      {"log_", "log", [](Tensor& t, const Inputs&) { t.log_(); }, [](const Tensor& t, const Inputs&) { return log(t); }, true},
      {"log1p_", "log1p", [](Tensor& t, const Inputs&) { t.log1p_(); }, [](const Tensor& t, const Inputs&) { return log1p(t); }, true},
      {"expm1_", "expm1", [](Tensor& t, const Inputs&) { t.expm1_(); }, [](const Tensor& t, const Inputs&) { return expm1(t); }},
      {"sqrt_", "sqrt", [](Tensor& t, const Inputs&) { t.sqrt_(); }, [](const Tensor& t, const Inputs&) { return sqrt(t); }, true},
      {"rsqrt_", "rsqrt", [](Tensor& t, const Inputs&) { t.rsqrt_(); }, [](const Tensor& t, const Inputs&) { return rsqrt(t); }, true},
      {"reciprocal_", "reciprocal", [](Tensor& t, const Inputs&) { t.reciprocal_(); },
       [](const Tensor& t, const Inputs&) { return reciprocal(t); }, true},
      {"sin_", "sin", [](Tensor& t, const Inputs&) { t.sin_(); }, [](const Tensor& t, const Inputs&) { return sin(t); }},
      {"cos_", "cos", [](Tensor& t, const Inputs&) { t.cos_(); }, [](const Tensor& t, const Inputs&) { return cos(t); }},
      {"tanh_", "tanh", [](Tensor& t, const Inputs&) { t.tanh_(); }, [](const Tensor& t, const Inputs&) { return tanh(t); }},
      {"sigmoid_", "sigmoid", [](Tensor& t, const Inputs&) { t.sigmoid_(); }, [](const Tensor& t, const Inputs&) { return sigmoid(t); }},
      {"relu_", "relu", [](Tensor& t, const Inputs&) { t.relu_(); }, [](const Tensor& t, const Inputs&) { return relu(t); }},
      {"erf_", "erf", [](Tensor& t, const Inputs&) { t.erf_(); }, [](const Tensor& t, const Inputs&) { return erf(t); }},
      {"pow_", "pow_scalar", [](Tensor& t, const Inputs&) { t.pow_(2.5); }, [](const Tensor& t, const Inputs&) { return pow(t, 2.5); }, true},
      {"clamp_", "clamp", [](Tensor& t, const Inputs&) { t.clamp_(-0.5, 0.5); },
       [](const Tensor& t, const Inputs&) { return clamp(t, -0.5, 0.5); }},
      {"clamp_min_", "clamp", [](Tensor& t, const Inputs&) { t.clamp_min_(0.1); },
       [](const Tensor& t, const Inputs&) { return clamp_min(t, 0.1); }},
      {"clamp_max_", "clamp", [](Tensor& t, const Inputs&) { t.clamp_max_(0.1); },
       [](const Tensor& t, const Inputs&) { return clamp_max(t, 0.1); }},
      {"masked_fill_", "masked_fill", [](Tensor& t, const Inputs& i) { t.masked_fill_(i.mask, 3.0); },
       [](const Tensor& t, const Inputs& i) { return masked_fill(t, i.mask, 3.0); }},
      {"add_", "add", [](Tensor& t, const Inputs& i) { t.add_(i.y, 0.5); }, [](const Tensor& t, const Inputs& i) { return add(t, i.y, 0.5); }},
      {"add_ scalar", "add", [](Tensor& t, const Inputs&) { t.add_(1.5); }, [](const Tensor& t, const Inputs&) { return t + 1.5; }},
      {"sub_", "sub", [](Tensor& t, const Inputs& i) { t.sub_(i.row, 2.0); }, [](const Tensor& t, const Inputs& i) { return sub(t, i.row, 2.0); }},
      {"mul_", "mul", [](Tensor& t, const Inputs& i) { t.mul_(i.y); }, [](const Tensor& t, const Inputs& i) { return mul(t, i.y); }},
      {"mul_ scalar", "mul_scalar", [](Tensor& t, const Inputs&) { t.mul_(3.0); }, [](const Tensor& t, const Inputs&) { return t * 3.0; }},
      {"div_", "div", [](Tensor& t, const Inputs& i) { t.div_(i.pos); }, [](const Tensor& t, const Inputs& i) { return div(t, i.pos); }},
      {"fill_", "fill", [](Tensor& t, const Inputs&) { t.fill_(2.5); }, [](const Tensor& t, const Inputs&) { return full_like(t, 2.5); }},
      {"zero_", "fill", [](Tensor& t, const Inputs&) { t.zero_(); }, [](const Tensor& t, const Inputs&) { return zeros_like(t); }},
      {"copy_", "copy", [](Tensor& t, const Inputs& i) { t.copy_(i.y); }, [](const Tensor&, const Inputs& i) { return clone(i.y); }},
      {"sub_ scalar", "sub", [](Tensor& t, const Inputs&) { t.sub_(0.75); }, [](const Tensor& t, const Inputs&) { return t - 0.75; }},
      {"div_ scalar", "div_scalar", [](Tensor& t, const Inputs&) { t.div_(3.0); }, [](const Tensor& t, const Inputs&) { return t / 3.0; }},
  };
}

}  // namespace

TEST_CASE("tensor methods: every method dispatches the free function's ops and matches it bit for bit",
          "[ops][methods]") {
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    check_cases(floating_cases(), make_inputs(dtype));
  }
}

TEST_CASE("tensor methods: detach and to(device) without a copy", "[ops][methods]") {
  const Tensor x = randn({3, 4}).requires_grad_();
  const Tensor d = x.detach();
  CHECK(d.data_ptr() == x.data_ptr());
  CHECK(!d.requires_grad());
  require_identical(d, x);
  require_identical(x.to(Device::cpu()), to(x, Device::cpu()));
}

TEST_CASE("tensor methods: integer operands", "[ops][methods]") {
  Inputs in = make_inputs(DType::F64);
  NoGradGuard no_grad;
  in.x = to(in.x * 3.0, DType::I64);  // whole numbers in (-6, 6), truncated
  in.y = to(in.y * 3.0, DType::I64);
  REQUIRE(in.x.dtype() == DType::I64);
  check_cases(integer_cases(), in);
}

TEST_CASE("tensor methods: in-place forms equal the out-of-place free functions", "[ops][methods]") {
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dtype));
    const Inputs in = make_inputs(dtype);
    for (const InplaceCase& c : inplace_cases()) {
      INFO("method " << c.name);
      const Tensor& operand = c.positive ? in.pos : in.x;
      Tensor t = clone(operand);
      const uint64_t version = t.version();
      const std::vector<std::string> ops = trace_of([&] { c.method(t, in); });
      CHECK(ops == std::vector<std::string>{std::string(c.op) + "_"});
      CHECK(t.version() > version);
      require_identical(t, c.free(operand, in));
    }
  }
}

TEST_CASE("tensor methods: in-place forms on integer tensors", "[ops][methods]") {
  Tensor x = from_vector<int64_t>({-3, 0, 4, -1}, {4});
  Tensor a = clone(x);
  a.neg_();
  CHECK(values(a) == std::vector<double>{3, 0, -4, 1});
  Tensor b = clone(x);
  b.abs_().clamp_(0, 2);  // chained: each returns the tensor
  CHECK(values(b) == std::vector<double>{2, 0, 2, 1});
  CHECK(b.dtype() == DType::I64);
  Tensor c = clone(x);
  c.relu_();
  CHECK(values(c) == std::vector<double>{0, 0, 4, 0});
  // A whole-number scalar keeps the integer dtype.
  Tensor e = clone(x);
  e.add_(2.0).mul_(3.0).sub_(1.0);
  CHECK(values(e) == std::vector<double>{-4, 5, 17, 2});
  CHECK(e.dtype() == DType::I64);
  // A floating result is refused (as PyTorch), never truncated into the integer tensor: exp,
  // a fractional scalar, true division.
  Tensor d = clone(x);
  MG_REQUIRE_ERROR(d.exp_(), "exp");
  MG_REQUIRE_ERROR(d.add_(0.5), "add_: the result is f32 but the tensor written in place is [4] i64 cpu");
  MG_REQUIRE_ERROR(d.sub_(ones({4})), "sub_: the result is f32");
  MG_REQUIRE_ERROR(d.div_(2.0), "div_: the result is f32");
  MG_REQUIRE_ERROR(d.div_(from_vector<int64_t>({2, 2, 2, 2}, {4})), "div_: the result is f32");
  CHECK(values(d) == values(x));
  Tensor flags = gt(x, scalar_like(0.0, x));  // bool
  MG_REQUIRE_ERROR(flags.add_(from_vector<int64_t>({1, 1, 1, 1}, {4})), "add_: the result is i64");
  // a floating tensor takes a wider floating operand, rounded into its dtype
  Tensor h = to(x, DType::F16);
  h.add_(from_vector<double>({0.5, 0.5, 0.5, 0.5}, {4}));
  CHECK(h.dtype() == DType::F16);
  CHECK(values(h) == std::vector<double>{-2.5, 0.5, 4.5, -0.5});
}

TEST_CASE("tensor methods: gradients through methods equal the free functions'", "[ops][methods][grad]") {
  manual_seed(7);
  const Tensor x0 = randn({3, 4}, {.dtype = DType::F64});
  const Tensor w0 = randn({4, 5}, {.dtype = DType::F64});
  const Tensor mask = gt(rand({3, 4}), scalar_tensor(0.5));
  const Tensor gidx = from_vector<int64_t>({3, 0, 1, 1, 2, 0}, {3, 2});
  using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;
  struct GradCase {
    const char* name;
    Loss method, free;
  };
  const std::vector<GradCase> cases = {
      {"matmul relu sum keepdim",
       [&](const Tensor& x, const Tensor& w) { return x.matmul(w).relu().sum({1}, true).pow(2).mean(); },
       [&](const Tensor& x, const Tensor& w) { return mean(pow(sum(relu(matmul(x, w)), {1}, true), 2)); }},
      {"softmax log_softmax",
       [&](const Tensor& x, const Tensor& w) { return x.softmax(-1).mul(x.log_softmax(0)).sum().add(w.exp().mean({0}).sum()); },
       [&](const Tensor& x, const Tensor& w) { return add(sum(mul(softmax(x, -1), log_softmax(x, 0))), sum(mean(exp(w), {0}))); }},
      {"tanh gelu clamp var norm",
       [&](const Tensor& x, const Tensor& w) { return x.tanh().gelu().clamp(-0.3, 0.6).var({1}).sum() + w.norm(); },
       [&](const Tensor& x, const Tensor& w) { return sum(var(clamp(gelu(tanh(x)), -0.3, 0.6), {1})) + norm(w); }},
      {"masked_fill gather logsumexp",
       [&](const Tensor& x, const Tensor& w) { return x.masked_fill(mask, 0.0).gather(1, gidx).logsumexp({0}).sum() + w.abs().amax(); },
       [&](const Tensor& x, const Tensor& w) { return sum(logsumexp(gather(masked_fill(x, mask, 0.0), 1, gidx), {0})) + amax(abs(w)); }},
  };
  for (const GradCase& c : cases) {
    INFO("case " << c.name);
    Tensor xa = clone(x0).requires_grad_(), wa = clone(w0).requires_grad_();
    Tensor xb = clone(x0).requires_grad_(), wb = clone(w0).requires_grad_();
    const Tensor la = c.method(xa, wa), lb = c.free(xb, wb);
    require_identical(la, lb);
    la.backward();
    lb.backward();
    REQUIRE(xa.grad().defined());
    require_identical(xa.grad(), xb.grad());
    require_identical(wa.grad(), wb.grad());
    // a gradient that is all zeros would make the comparison vacuous
    CHECK(sum(abs(xa.grad())).item<double>() > 0);
  }
}

TEST_CASE("tensor methods: an in-place method records history like the free function", "[ops][methods][grad]") {
  manual_seed(8);
  const Tensor x0 = randn({2, 3}, {.dtype = DType::F64});
  Tensor xa = clone(x0).requires_grad_();
  Tensor h = xa * 2.0;
  h.tanh_().mul_(3.0);  // 3 tanh(2x)
  h.sum().backward();
  Tensor xb = clone(x0).requires_grad_();
  (tanh(xb * 2.0) * 3.0).sum().backward();
  require_identical(xa.grad(), xb.grad());
  // d/dx 3 tanh(2x) = 6 (1 - tanh(2x)^2)
  const std::vector<double> g = values(xa.grad()), x = values(x0);
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(6 * (1 - std::tanh(2 * x[i]) * std::tanh(2 * x[i]))).epsilon(1e-12));
  // a leaf that requires grad is refused, naming the in-place op
  Tensor leaf = clone(x0).requires_grad_();
  MG_REQUIRE_ERROR(leaf.exp_(), "exp_: a leaf tensor that requires grad");
}

TEST_CASE("tensor methods: the calls of issue 13 with golden values", "[ops][methods]") {
  // x = [[1, 2, 3], [4, 5, 6]]
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor s = x.sum({1}, true);
  CHECK(s.shape() == Shape{2, 1});
  CHECK(values(s) == std::vector<double>{6, 15});
  const Tensor e = x.exp();
  CHECK(e.dtype() == DType::F32);
  for (int i = 0; i < 6; ++i) CHECK(values(e)[i] == Approx(std::exp(i + 1.0)).epsilon(1e-6));
  // [[1, 2, 3], [4, 5, 6]] @ [[1, 0], [0, 1], [1, 1]] = [[4, 5], [10, 11]]
  const Tensor w = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  const Tensor m = x.matmul(w);
  CHECK(m.shape() == Shape{2, 2});
  CHECK(values(m) == std::vector<double>{4, 5, 10, 11});
  CHECK(values((x - 3.5).relu()) == std::vector<double>{0, 0, 0, 0.5, 1.5, 2.5});
  const Tensor z = from_vector<float>({0.5f, 3, -1, 9, 2, 9}, {2, 3});
  const Tensor am = z.argmax(1);
  CHECK(am.dtype() == DType::I64);
  CHECK(values(am) == std::vector<double>{1, 0});  // ties: the first index
  CHECK(values(x.pow(2)) == std::vector<double>{1, 4, 9, 16, 25, 36});
  const Tensor mu = x.mean({0});
  CHECK(mu.shape() == Shape{3});
  CHECK(values(mu) == std::vector<double>{2.5, 3.5, 4.5});
  // softmax([1, 2, 3]) = e^k / (e + e^2 + e^3)
  const Tensor p = x.softmax(-1);
  const double denom = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) CHECK(values(p)[r * 3 + k] == Approx(std::exp(k + 1.0) / denom).epsilon(1e-6));
  }
  // var / std with LibTorch's bool `unbiased` spelling: true is correction 1
  CHECK(values(x.var({1}, true)) == std::vector<double>{1, 1});  // var([1, 2, 3]) = 2 / (3 - 1)
  CHECK(values(x.std({1}, false))[0] == Approx(std::sqrt(2.0 / 3.0)));
}

TEST_CASE("tensor methods: errors come from the free function and name the op", "[ops][methods]") {
  const Tensor x = ones({2, 3});
  MG_REQUIRE_ERROR(x.matmul(ones({2, 3})), "matmul");
  MG_REQUIRE_ERROR(x.sum({2}), "sum");
  MG_REQUIRE_ERROR(x.softmax(5), "softmax");
  Tensor y = ones({2, 3});
  MG_REQUIRE_ERROR(y.masked_fill_(ones({2, 3}), 0.0), "masked_fill: expected a bool mask");
  MG_REQUIRE_ERROR(Tensor().exp(), "undefined");
}

TEST_CASE("tensor methods: docs/tensor_methods.md lists every method core/tensor.h declares", "[ops][methods][docs]") {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    INFO("reading " << path);
    REQUIRE(in.good());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string header = read(MG_SOURCE_DIR "/core/tensor.h");
  const std::string doc = read(MG_SOURCE_DIR "/docs/tensor_methods.md");
  const std::size_t begin = header.find("// ---- LibTorch-style methods");
  const std::size_t end = header.find("std::string str() const;", begin);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  // Every "Tensor name(", "Tensor& name(", "...> name(" declaration in the block.
  const std::regex decl(R"((?:Tensor&?|Tensor>|Tensors|std::vector<Tensor>) ([a-z_0-9]+)\()");
  const std::string block = header.substr(begin, end - begin);
  int count = 0;
  for (auto it = std::sregex_iterator(block.begin(), block.end(), decl); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    INFO("method " << name);
    const bool listed = doc.find("x." + name + "(") != std::string::npos || doc.find("c." + name + "(") != std::string::npos;
    CHECK(listed);
    ++count;
  }
  CHECK(count > 100);  // the block was found and parsed
}
