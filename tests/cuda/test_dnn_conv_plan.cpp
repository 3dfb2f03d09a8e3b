// The host side of the cuDNN convolution (cuda/host/dnn_conv_plan.h) on the CPU, no GPU needed:
// which engine runs a conv (the declared im2col cases), degenerate sizes, layout detection from
// strides (against tensors made by the public ops), the copies into a layout, the descriptors'
// dims and strides (checked against real tensors' element offsets), the math mode per dtype and
// TF32 switch, the cache key, filtering of cuDNN's algorithm lists (deterministic mode, strict f32,
// failures, duplicates, benchmark order), the workspace fallback order, the run loop over the
// candidates against a fake device (out of memory, refusals) and the error text.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "core/factory.h"
#include "cuda/host/dnn_conv_plan.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::cuda;

namespace {

// x [2, 3, 9, 8], w [5, 3, 3, 3], padding 1 -> y [2, 5, 9, 8]
ConvDims dims_3x3() { return conv_dims({1, 1, 1, 1, 1, 1, 1}, 2, 3, 9, 8, 5, 3, 3); }

Tensor nhwc_of(const Shape& s) {  // [N, C, H, W] values 0, 1, 2, ... in NCHW order, stored NHWC
  const Tensor x = arange(0, shape_numel(s), 1, {.dtype = DType::F32}).reshape(s);
  return permute(contiguous(permute(x, {0, 2, 3, 1})), {0, 3, 1, 2});
}

DnnAlgoResult res(int algo, bool ok, float t, std::size_t ws, bool det, DnnMath m) {
  return {.algo = algo, .ok = ok, .time_ms = t, .workspace = ws, .deterministic = det, .math = m};
}

}  // namespace

TEST_CASE("cudnn conv plan: the engine of each conv, im2col only where declared", "[cuda][conv][cudnn]") {
  const ConvDims g = dims_3x3();
  for (const ConvDirection dir : {ConvDirection::Forward, ConvDirection::BackwardInput, ConvDirection::BackwardWeight}) {
    for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
      const ConvEngineChoice e = conv_engine(dir, dt, g);
      CHECK(e.engine == ConvEngine::Cudnn);
      CHECK(e.reason == nullptr);
    }
    const ConvEngineChoice f64 = conv_engine(dir, DType::F64, g);
    CHECK(f64.engine == ConvEngine::Im2col);
    CHECK(std::string(f64.reason).find("f64") != std::string::npos);
  }
  // Beyond int indexing: x [1024, 64, 256, 256] has 2^32 elements.
  const ConvDims big = conv_dims({1, 1, 1, 1, 1, 1, 1}, 1024, 64, 256, 256, 64, 3, 3);
  CHECK(conv_engine(ConvDirection::Forward, DType::F16, big).engine == ConvEngine::Im2col);
  const ConvDims edge = conv_dims({1, 1, 0, 0, 1, 1, 1}, 1, 1, 46341, 46340, 1, 1, 1);  // 2147441940 elements: fits
  CHECK(conv_engine(ConvDirection::Forward, DType::F16, edge).engine == ConvEngine::Cudnn);
  // conv_transpose2d of a [1, 2, 2, 2] input, 3x3, stride 2, dilation 3, output_padding 2 (>= the
  // stride, below the dilation): output size (2 - 1) 2 + 3 (3 - 1) + 2 + 1 = 11, whose forward size
  // is (11 - 6 - 1) / 2 + 1 = 3, not 2 -> im2col; a gradient of the forward size -> cuDNN.
  ConvDims t = conv_dims({2, 2, 0, 0, 3, 3, 1}, 1, 2, 11, 11, 2, 3, 3);
  CHECK(t.Ho == 3);
  CHECK(conv_engine(ConvDirection::BackwardInput, DType::F16, t).engine == ConvEngine::Cudnn);
  t.Ho = 2;
  const ConvEngineChoice tr = conv_engine(ConvDirection::BackwardInput, DType::F16, t);
  CHECK(tr.engine == ConvEngine::Im2col);
  CHECK(std::string(tr.reason).find("output_padding") != std::string::npos);
}

TEST_CASE("cudnn conv plan: degenerate sizes never reach cuDNN", "[cuda][conv][cudnn]") {
  ConvDims g = dims_3x3();
  for (const ConvDirection dir : {ConvDirection::Forward, ConvDirection::BackwardInput, ConvDirection::BackwardWeight}) {
    CHECK(conv_trivial(dir, g) == ConvTrivial::None);
  }
  g.N = 0;  // no batch: empty y and dx, a zero weight gradient
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Zero);
  g = dims_3x3();
  g.C = 0;  // no input channels: y is the bias alone, dx and dw are empty
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Empty);
  g = dims_3x3();
  g.O = 0;  // no output channels: y and dw empty, dx is the bias alone (conv_transpose2d)
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Empty);
  // A zero-size input whose padding covers the kernel (x [N, C, 0, W], pad 1, 1x1 kernel): y is the
  // bias alone, dx is empty, dw is 0. cuDNN's descriptors refuse a zero dimension.
  g = conv_dims({1, 1, 1, 1, 1, 1, 1}, 2, 3, 0, 5, 4, 1, 1);
  REQUIRE(g.Ho == 2);
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Zero);
  // A gradient of zero spatial size (conv_transpose2d of a [N, C, 0, W] input): dx is 0 plus the bias.
  g = dims_3x3();
  g.Ho = 0;
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Empty);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Zero);
  // A kernel of zero size: y is the bias alone, dx 0, dw empty.
  g = dims_3x3();
  g.kW = 0;
  CHECK(conv_trivial(ConvDirection::Forward, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardInput, g) == ConvTrivial::Zero);
  CHECK(conv_trivial(ConvDirection::BackwardWeight, g) == ConvTrivial::Empty);
}

TEST_CASE("cudnn conv plan: a refusal of the problem tries the next algorithm, a broken installation is raised",
          "[cuda][conv][cudnn]") {
  for (int refused : {3000, 3001, 3002, 3003, 3004, 3010, 3011, 3012, 3014}) CHECK(dnn_status_refuses(refused));
  // incompatible driver / CUDA runtime, architecture mismatch, missing prerequisite or sub-library,
  // CUDA graph native API; success; BAD_PARAM; an internal error
  for (int raised : {3005, 3006, 3007, 3008, 3009, 3013, 0, 2000, 4000}) CHECK_FALSE(dnn_status_refuses(raised));
}

TEST_CASE("cudnn conv plan: layouts are read from the strides", "[cuda][conv][cudnn]") {
  const Tensor nchw = zeros({2, 3, 4, 5});
  const Tensor nhwc = nhwc_of({2, 3, 4, 5});
  CHECK(nhwc.strides() == Strides{60, 1, 15, 3});
  const LayoutMatch a = layout_match(nchw), b = layout_match(nhwc);
  CHECK((a.nchw && !a.nhwc));
  CHECK((!b.nchw && b.nhwc));
  // Shapes where both layouts coincide: one channel, 1x1 planes (a 1x1 conv's weight), no elements.
  for (const Shape& s : {Shape{2, 1, 4, 5}, Shape{8, 16, 1, 1}, Shape{0, 3, 4, 5}}) {
    INFO(shape_str(s));
    const LayoutMatch m = layout_match(zeros(s)), n = layout_match(nhwc_of(s));
    CHECK((m.nchw && m.nhwc && n.nchw && n.nhwc));
  }
  // Neither: a slice along W, H and W transposed.
  const LayoutMatch sl = layout_match(zeros({2, 3, 4, 10}).slice(3, 0, 10, 2));
  CHECK((!sl.nchw && !sl.nhwc));
  const LayoutMatch tr = layout_match(transpose(zeros({2, 3, 4, 5}), 2, 3));
  CHECK((!tr.nchw && !tr.nhwc));
  // The conv's layout: NHWC as soon as one operand is channels-last only.
  const LayoutMatch both{true, true}, c_last{false, true}, c_first{true, false}, neither{};
  CHECK(choose_conv_layout({c_first, both, c_first}) == ConvLayout::NCHW);
  CHECK(choose_conv_layout({c_first, both, c_last}) == ConvLayout::NHWC);
  CHECK(choose_conv_layout({c_last, both}) == ConvLayout::NHWC);
  CHECK(choose_conv_layout({both, both}) == ConvLayout::NCHW);
  CHECK(choose_conv_layout({neither, c_first}) == ConvLayout::NCHW);
  CHECK(std::string(layout_name(ConvLayout::NHWC)) == "NHWC");
}

TEST_CASE("cudnn conv plan: in_layout copies only what is not already in the layout", "[cuda][conv][cudnn]") {
  const Tensor x = arange(0, 120, 1, {.dtype = DType::F32}).reshape({2, 3, 4, 5});
  const Tensor to_nhwc = in_layout(x, ConvLayout::NHWC);
  CHECK(layout_match(to_nhwc).nhwc);
  CHECK(!layout_match(to_nhwc).nchw);
  CHECK(mg::test::values(to_nhwc) == mg::test::values(x));  // same values, other memory order
  CHECK(in_layout(x, ConvLayout::NCHW).is_same(x));
  CHECK(in_layout(to_nhwc, ConvLayout::NHWC).is_same(to_nhwc));
  const Tensor back = in_layout(to_nhwc, ConvLayout::NCHW);
  CHECK(back.is_contiguous());
  CHECK(mg::test::values(back) == mg::test::values(x));
  // A dense view that does not start on a 16-byte boundary is copied (cuDNN's kernels assume the
  // alignment); one that does is used as it is.
  const Tensor base = zeros({3, 3, 4, 5}, {.dtype = DType::F16});
  const Tensor odd = base.narrow(0, 1, 2);  // 60 halves = 120 bytes in
  REQUIRE(layout_match(odd).nchw);
  CHECK_FALSE(aligned_for_cudnn(odd));
  const Tensor fixed = in_layout(odd, ConvLayout::NCHW);
  CHECK_FALSE(fixed.is_same(odd));
  CHECK(aligned_for_cudnn(fixed));
  CHECK(layout_match(fixed).nchw);
  CHECK(aligned_for_cudnn(in_layout(odd, ConvLayout::NHWC)));
  const Tensor even = zeros({4, 3, 4, 8}, {.dtype = DType::F16}).narrow(0, 1, 2);  // 96 halves = 192 bytes in
  CHECK(in_layout(even, ConvLayout::NCHW).is_same(even));
  // A strided slice becomes dense in either layout.
  const Tensor sl = zeros({2, 3, 4, 10}).slice(3, 0, 10, 2);
  CHECK(layout_match(in_layout(sl, ConvLayout::NHWC)).nhwc);
  CHECK(layout_match(in_layout(sl, ConvLayout::NCHW)).nchw);
  const Tensor e = empty_in_layout({2, 3, 4, 5}, DType::BF16, Device::cpu(), ConvLayout::NHWC);
  CHECK(e.shape() == Shape{2, 3, 4, 5});
  CHECK(e.dtype() == DType::BF16);
  CHECK(e.strides() == Strides{60, 1, 15, 3});
  CHECK(empty_in_layout({2, 3, 4, 5}, DType::F32, Device::cpu(), ConvLayout::NCHW).is_contiguous());
}

TEST_CASE("cudnn conv plan: descriptor strides address the tensors' elements", "[cuda][conv][cudnn]") {
  // The descriptors' (dims, strides) must name the same memory as the tensors the kernel hands
  // over: for every element, Σ index·stride equals the tensor's own offset of that element.
  const ConvDims g = dims_3x3();
  for (const ConvLayout layout : {ConvLayout::NCHW, ConvLayout::NHWC}) {
    INFO(layout_name(layout));
    const DnnConvProblem p = make_dnn_conv_problem(ConvDirection::Forward, DType::F16, g, layout, {});
    const DnnTensorParams xp = dnn_x_params(p), yp = dnn_y_params(p);
    CHECK(xp.dims == std::array<int64_t, 4>{2, 3, 9, 8});
    CHECK(yp.dims == std::array<int64_t, 4>{2, 5, 9, 8});
    CHECK(dnn_filter_dims(p) == std::array<int64_t, 4>{5, 3, 3, 3});
    for (const auto& [params, shape] :
         std::vector<std::pair<DnnTensorParams, Shape>>{{xp, {2, 3, 9, 8}}, {yp, {2, 5, 9, 8}}}) {
      const Tensor t = empty_in_layout(shape, DType::F16, Device::cpu(), layout);
      CHECK(Strides(params.strides.begin(), params.strides.end()) == t.strides());
    }
    // The filter in NHWC: [O, kH, kW, C/groups] in memory, the order in_layout gives a weight.
    const Tensor w = in_layout(zeros({5, 3, 3, 3}), layout);
    CHECK(Strides(w.strides().begin(), w.strides().end()) ==
          (layout == ConvLayout::NCHW ? Strides{27, 9, 3, 1} : Strides{27, 1, 9, 3}));
  }
  // layout_strides of NHWC by hand: [N, C, H, W] = [2, 3, 9, 8] -> {216, 1, 24, 3}
  CHECK(layout_strides({2, 3, 9, 8}, ConvLayout::NHWC) == std::array<int64_t, 4>{216, 1, 24, 3});
  CHECK(layout_strides({2, 3, 9, 8}, ConvLayout::NCHW) == std::array<int64_t, 4>{216, 72, 8, 1});
}

TEST_CASE("cudnn conv plan: math type per dtype and the TF32 switch", "[cuda][conv][cudnn]") {
  CHECK(conv_math(DType::F16, false) == DnnMath::TensorOp);
  CHECK(conv_math(DType::BF16, true) == DnnMath::TensorOp);
  CHECK(conv_math(DType::F32, false) == DnnMath::Fma);  // strict f32 by default
  CHECK(conv_math(DType::F32, true) == DnnMath::Default);  // cuDNN may use TF32
  CHECK(conv_math(DType::F64, true) == DnnMath::Fma);
  for (const DType dt : {DType::F16, DType::BF16, DType::F32}) CHECK(conv_compute_dtype(dt) == DType::F32);
  CHECK(conv_compute_dtype(DType::F64) == DType::F64);
}

TEST_CASE("cudnn conv plan: the cache key tells apart everything the choice depends on", "[cuda][conv][cudnn]") {
  const ConvDims g = dims_3x3();
  const DnnConvProblem base = make_dnn_conv_problem(ConvDirection::Forward, DType::F16, g, ConvLayout::NHWC, {});
  std::vector<DnnConvProblem> variants;
  auto vary = [&](auto change) {
    DnnConvProblem p = base;
    change(p);
    variants.push_back(p);
  };
  vary([](DnnConvProblem&) {});
  vary([](DnnConvProblem& p) { p.dir = ConvDirection::BackwardInput; });
  vary([](DnnConvProblem& p) { p.dir = ConvDirection::BackwardWeight; });
  vary([](DnnConvProblem& p) { p.dtype = DType::BF16; });
  vary([](DnnConvProblem& p) { p.layout = ConvLayout::NCHW; });
  vary([](DnnConvProblem& p) { p.math = DnnMath::Default; });
  vary([](DnnConvProblem& p) { p.deterministic = true; });
  vary([](DnnConvProblem& p) { p.benchmark = true; });
  vary([](DnnConvProblem& p) { p.device = 1; });
  vary([](DnnConvProblem& p) { p.alignment = 2; });
  vary([](DnnConvProblem& p) { p.g.N = 3; });
  vary([](DnnConvProblem& p) { p.g.C = 6; });
  vary([](DnnConvProblem& p) { p.g.H = 10; });
  vary([](DnnConvProblem& p) { p.g.W = 9; });
  vary([](DnnConvProblem& p) { p.g.O = 7; });
  vary([](DnnConvProblem& p) { p.g.kH = 1; });
  vary([](DnnConvProblem& p) { p.g.kW = 1; });
  vary([](DnnConvProblem& p) { p.g.Ho = 4; });
  vary([](DnnConvProblem& p) { p.g.Wo = 4; });
  vary([](DnnConvProblem& p) { p.g.sh = 2; });
  vary([](DnnConvProblem& p) { p.g.sw = 2; });
  vary([](DnnConvProblem& p) { p.g.ph = 0; });
  vary([](DnnConvProblem& p) { p.g.pw = 0; });
  vary([](DnnConvProblem& p) { p.g.dh = 2; });
  vary([](DnnConvProblem& p) { p.g.dw = 2; });
  vary([](DnnConvProblem& p) { p.g.groups = 3; });
  std::set<std::vector<int64_t>> keys;
  for (const DnnConvProblem& p : variants) keys.insert(dnn_conv_key(p));
  CHECK(keys.size() == variants.size());
  CHECK(dnn_conv_key(base) == dnn_conv_key(variants[0]));  // equal problems, equal keys
  // make_dnn_conv_problem takes the switches
  const DnnConvProblem m = make_dnn_conv_problem(ConvDirection::BackwardWeight, DType::F32, g, ConvLayout::NCHW,
                                                 {.allow_tf32 = true, .deterministic = true, .benchmark = true, .device = 2});
  CHECK((m.math == DnnMath::Default && m.deterministic && m.benchmark && m.device == 2));
}

TEST_CASE("cudnn conv plan: pointer alignment", "[cuda][conv][cudnn]") {
  alignas(16) static char buf[64];
  CHECK(pointer_alignment({buf, buf + 32}) == 16);
  CHECK(pointer_alignment({buf, buf + 8}) == 8);
  CHECK(pointer_alignment({buf + 4, buf + 32}) == 4);
  CHECK(pointer_alignment({buf + 2}) == 2);
  CHECK(pointer_alignment({buf + 16, buf + 1}) == 1);
}

TEST_CASE("cudnn conv plan: filtering cuDNN's algorithm list", "[cuda][conv][cudnn]") {
  const ConvDims g = dims_3x3();
  const DnnConvProblem f16 = make_dnn_conv_problem(ConvDirection::Forward, DType::F16, g, ConvLayout::NHWC, {});
  const std::vector<DnnAlgoResult> list = {
      res(1, true, 0.5f, 1000, false, DnnMath::TensorOp),
      res(0, true, 0.9f, 0, true, DnnMath::TensorOp),
      res(6, false, -1, 0, true, DnnMath::TensorOp),                   // failed
      res(2, true, 0.2f, 5000, true, DnnMath::TensorOpAllowConversion),  // f16 data only
      res(7, true, 0.3f, 2000, true, DnnMath::Default),
      res(1, true, 0.6f, 1000, false, DnnMath::TensorOp),              // duplicate of the first
      res(5, true, 0.4f, 0, true, DnnMath::Fma),
  };
  SECTION("heuristic order, any determinism; bf16 refuses the conversion to f16") {
    const DnnConvProblem bf16 = make_dnn_conv_problem(ConvDirection::Forward, DType::BF16, g, ConvLayout::NHWC, {});
    DnnFilterStats s;
    const std::vector<DnnAlgoChoice> c = filter_conv_algos(list, bf16, false, &s);
    REQUIRE(c.size() == 4);
    CHECK(c[0] == DnnAlgoChoice{1, 1000, DnnMath::TensorOp});
    CHECK(c[1] == DnnAlgoChoice{0, 0, DnnMath::TensorOp});
    CHECK(c[2] == DnnAlgoChoice{7, 2000, DnnMath::Default});
    CHECK(c[3] == DnnAlgoChoice{5, 0, DnnMath::Fma});
    CHECK((s.failed == 1 && s.nondeterministic == 0 && s.wrong_math == 1));
  }
  SECTION("f16 keeps the conversion (a no-op on f16 data); benchmark order: by measured time") {
    const std::vector<DnnAlgoChoice> h = filter_conv_algos(list, f16, false);
    REQUIRE(h.size() == 5);
    CHECK(h[2] == DnnAlgoChoice{2, 5000, DnnMath::TensorOpAllowConversion});
    const std::vector<DnnAlgoChoice> c = filter_conv_algos(list, f16, true);
    std::vector<int> algos;
    for (const DnnAlgoChoice& x : c) algos.push_back(x.algo);
    CHECK(algos == std::vector<int>{2, 7, 5, 1, 0});
  }
  SECTION("deterministic mode drops the nondeterministic algorithms") {
    DnnConvProblem p = f16;
    p.deterministic = true;
    DnnFilterStats s;
    const std::vector<DnnAlgoChoice> c = filter_conv_algos(list, p, false, &s);
    std::vector<int> algos;
    for (const DnnAlgoChoice& x : c) algos.push_back(x.algo);
    CHECK(algos == std::vector<int>{0, 2, 7, 5});
    CHECK(s.nondeterministic == 2);
  }
  SECTION("strict f32: Tensor Core math dropped, FMA (or Default run as FMA) kept") {
    const DnnConvProblem f32 = make_dnn_conv_problem(ConvDirection::Forward, DType::F32, g, ConvLayout::NCHW, {});
    DnnFilterStats s;
    const std::vector<DnnAlgoChoice> c = filter_conv_algos(list, f32, false, &s);
    REQUIRE(c.size() == 2);
    CHECK(c[0] == DnnAlgoChoice{7, 2000, DnnMath::Fma});
    CHECK(c[1] == DnnAlgoChoice{5, 0, DnnMath::Fma});
    CHECK(s.wrong_math == 4);  // three TensorOp entries (a duplicate included) and one conversion
  }
  SECTION("TF32 allowed: Tensor Core math kept for f32") {
    const DnnConvProblem tf32 = make_dnn_conv_problem(ConvDirection::Forward, DType::F32, g, ConvLayout::NCHW,
                                                      {.allow_tf32 = true});
    CHECK(filter_conv_algos(list, tf32, false).size() == 4);  // all but the failed one and the conversion
  }
}

TEST_CASE("cudnn conv plan: workspace fallback order and the Find workspace", "[cuda][conv][cudnn]") {
  const std::vector<DnnAlgoChoice> c = {{1, 4000, DnnMath::TensorOp},
                                        {2, 8000, DnnMath::TensorOp},
                                        {3, 4000, DnnMath::TensorOp},
                                        {4, 1000, DnnMath::TensorOp},
                                        {5, 0, DnnMath::TensorOp}};
  CHECK(next_workspace_fallback(c, 0) == 3);  // 8000 and 4000 do not need less than 4000
  CHECK(next_workspace_fallback(c, 1) == 2);
  CHECK(next_workspace_fallback(c, 3) == 4);
  CHECK(next_workspace_fallback(c, 4) == -1);  // nothing needs less than nothing
  // The chain from the first candidate ends at one without a workspace.
  std::vector<int> chain;
  for (int i = 0; i >= 0; i = next_workspace_fallback(c, std::size_t(i))) chain.push_back(c[std::size_t(i)].algo);
  CHECK(chain == std::vector<int>{1, 4, 5});
  const std::vector<DnnAlgoResult> h = {res(0, true, -1, 300, true, DnnMath::TensorOp),
                                        res(1, false, -1, 1 << 20, true, DnnMath::TensorOp),  // failed: ignored
                                        res(2, true, -1, 5000, true, DnnMath::TensorOp)};
  CHECK(find_workspace_bytes(h) == 5000);
  CHECK(find_workspace_bytes(h, 1024) == 1024);
  CHECK(find_workspace_bytes({}) == 0);
}

namespace {

// A device with `free` bytes for workspaces that refuses the algorithms in `refuse`; it records
// every step it was asked for ("ws N" / "run A").
struct FakeRunner final : DnnRunner {
  std::size_t free = 0;
  std::set<int> refuse;
  std::vector<std::string> log;
  bool take_workspace(std::size_t bytes) override {
    log.push_back("ws " + std::to_string(bytes));
    return bytes <= free;
  }
  bool run(const DnnAlgoChoice& c) override {
    log.push_back("run " + std::to_string(c.algo));
    return refuse.count(c.algo) == 0;
  }
};

}  // namespace

TEST_CASE("cudnn conv plan: running the candidates, workspace fallbacks and refusals", "[cuda][conv][cudnn]") {
  const std::vector<DnnAlgoChoice> c = {{1, 4000, DnnMath::TensorOp},
                                        {2, 8000, DnnMath::TensorOp},
                                        {3, 1000, DnnMath::TensorOp},
                                        {4, 0, DnnMath::TensorOp}};
  SECTION("the first fits and runs") {
    FakeRunner f;
    f.free = 1 << 20;
    const DnnRunResult r = run_candidates(c, f);
    CHECK((r.outcome == DnnRunOutcome::Ran && r.index == 0 && r.refused.empty()));
    CHECK(f.log == std::vector<std::string>{"ws 4000", "run 1"});
  }
  SECTION("out of memory: only candidates needing less are tried (8000 is skipped)") {
    FakeRunner f;
    f.free = 1500;
    const DnnRunResult r = run_candidates(c, f);
    CHECK((r.outcome == DnnRunOutcome::Ran && r.index == 2));
    CHECK(f.log == std::vector<std::string>{"ws 4000", "ws 1000", "run 3"});
  }
  SECTION("no memory at all: the candidate without a workspace") {
    FakeRunner f;
    const DnnRunResult r = run_candidates(c, f);
    CHECK((r.outcome == DnnRunOutcome::Ran && r.index == 3));
    CHECK(f.log == std::vector<std::string>{"ws 4000", "ws 1000", "ws 0", "run 4"});
  }
  SECTION("refused candidates are reported and the next one runs") {
    FakeRunner f;
    f.free = 1 << 20;
    f.refuse = {1, 2};
    const DnnRunResult r = run_candidates(c, f);
    CHECK((r.outcome == DnnRunOutcome::Ran && r.index == 2));
    CHECK(r.refused == std::vector<std::size_t>{0, 1});
    CHECK(f.log == std::vector<std::string>{"ws 4000", "run 1", "ws 8000", "run 2", "ws 1000", "run 3"});
  }
  SECTION("everything refused") {
    FakeRunner f;
    f.free = 1 << 20;
    f.refuse = {1, 2, 3, 4};
    const DnnRunResult r = run_candidates(c, f);
    CHECK(r.outcome == DnnRunOutcome::AllRefused);
    CHECK(r.refused.size() == 4);
  }
  SECTION("out of memory with nothing smaller left") {
    const std::vector<DnnAlgoChoice> big = {{5, 3000, DnnMath::TensorOp}, {6, 3000, DnnMath::TensorOp}};
    FakeRunner f;
    f.free = 100;
    const DnnRunResult r = run_candidates(big, f);
    CHECK((r.outcome == DnnRunOutcome::OutOfMemory && r.index == 0));
    CHECK(f.log == std::vector<std::string>{"ws 3000"});
  }
}

TEST_CASE("cudnn conv plan: describe and the no-algorithm error name shape, dtype and layout",
          "[cuda][conv][cudnn]") {
  const ConvDims g = dims_3x3();
  DnnConvProblem p = make_dnn_conv_problem(ConvDirection::BackwardInput, DType::BF16, g, ConvLayout::NHWC, {});
  CHECK(describe(p) ==
        "x [2, 3, 9, 8] bf16 NHWC, w [5, 3, 3, 3], y [2, 5, 9, 8], stride [1, 1], padding [1, 1], "
        "dilation [1, 1], groups 1, math TensorOp");
  p.deterministic = true;
  const std::string det = dnn_no_algo_message("conv2d_backward_input", p, {.failed = 1, .nondeterministic = 3}, 4);
  CHECK(det.rfind("conv2d_backward_input: cuDNN has no backward-data algorithm for x [2, 3, 9, 8] bf16 NHWC", 0) == 0);
  CHECK(det.find("deterministic") != std::string::npos);
  CHECK(det.find("it offered 4: 1 failed, 3 nondeterministic, 0 with a math type not allowed") != std::string::npos);
  CHECK(det.find("hint: set_cudnn_deterministic(false)") != std::string::npos);
  const DnnConvProblem f32 = make_dnn_conv_problem(ConvDirection::Forward, DType::F32, g, ConvLayout::NCHW, {});
  const std::string m = dnn_no_algo_message("conv2d", f32, {.wrong_math = 2}, 2);
  CHECK(m.rfind("conv2d: cuDNN has no forward algorithm for x [2, 3, 9, 8] f32 NCHW", 0) == 0);
  CHECK(m.find("hint: set_allow_tf32(true)") != std::string::npos);
  const std::string none = dnn_no_algo_message("conv2d", f32, {}, 0);
  CHECK(none.find("without a workspace size") == std::string::npos);
  CHECK(dnn_no_algo_message("conv2d", f32, {.no_workspace = 2}, 2).find(", 2 without a workspace size)") !=
        std::string::npos);
  CHECK(none.find("hint: try the other layout") != std::string::npos);
}
