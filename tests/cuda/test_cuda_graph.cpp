// CUDA graphs on the GPU ([gpu]; benchmarks/gpu/check.sh runs them): a training step captured once
// and replayed equals the same steps run eagerly, bit for bit —
// - SGD with momentum at O2 (f16 model, f32 masters) with dynamic loss scaling that grows and
//   skips during the run;
// - AdamW (device step counts, no scaler) with an lr changed before every step;
// - dropout, whose masks differ from replay to replay and equal the eager sequence;
// and a captured step that synchronises (item(), cuda::synchronize) throws a CudaError naming the
// call, abandons the capture and leaves CUDA usable. The host logic behind these is tested on the
// CPU: test_capture_registry.cpp, test_graph_pool.cpp, tests/core/test_generator_graph.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/pinned_memory.h"
#include "cuda/host/captured_step.h"
#include "cuda_test_util.h"
#include "nn/linear.h"
#include "ops/checkpoint.h"
#include "autograd/grad_mode.h"
#include "ops/interpolate.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "ops/pad.h"
#include "optim/adadelta.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamax.h"
#include "optim/asgd.h"
#include "optim/functors.h"
#include "optim/lamb.h"
#include "optim/nadam.h"
#include "optim/radam.h"
#include "optim/rmsprop.h"
#include "optim/rprop.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using test::gpu;

namespace {

// A two-layer perceptron: x [B, 32] -> relu(x w1 + b1) [B, 64] (dropout p) -> [B, 10].
struct Mlp {
  Tensor w1, b1, w2, b2;  // the model's dtype, on the GPU, requiring grad
  Tensors params() const { return {w1, b1, w2, b2}; }
  Tensor forward(const Tensor& x, double p) const {
    Tensor h = relu(matmul(x, w1) + b1);
    if (p > 0) h = dropout(h, p, true);
    return matmul(h, w2) + b2;
  }
};

Mlp make_mlp(uint64_t seed, DType dt) {
  Generator g(seed);
  auto param = [&](const Shape& s) { return (randn(s, {}, &g) * 0.3).to(dt).to(gpu()).requires_grad_(); };
  return {param({32, 64}), param({64}), param({64, 10}), param({10})};
}

struct Batch {
  Tensor x, y;  // [16, 32] on the CPU, [16] i64
};
std::vector<Batch> make_batches(int n, DType dt) {
  Generator g(3);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({(randn({16, 32}, {}, &g) * 2.0).to(dt), randint(0, 10, {16}, {.dtype = DType::I64}, &g)});
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.detach().contiguous().to(Device::cpu());
  std::vector<uint8_t> b(std::size_t(h.numel()) * h.element_size());
  std::memcpy(b.data(), h.data_ptr(), b.size());
  return b;
}

void require_same_bits(const Tensors& a, const Tensors& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i << ": " << describe(a[i]));
    CHECK(bytes_of(a[i]) == bytes_of(b[i]));
  }
}

}  // namespace

TEST_CASE("CUDA graph: an O2 f16 SGD step with dynamic loss scaling replays bit for bit", "[cuda][gpu][graph]") {
  const std::vector<Batch> batches = make_batches(12, DType::F16);
  // init_scale 2^20 overflows f16 gradients at first (skipped steps, back-offs), growth_interval 3
  // grows it again inside the run: the scale's device transitions are part of the replays.
  const amp::GradScalerOptions scaling{.init_scale = 1048576.0, .growth_interval = 3};
  auto step = [](const Mlp& m, optim::SGD& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(m.forward(x, 0.0).to(DType::F32), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  // Eager.
  const Mlp a = make_mlp(1, DType::F16);
  optim::SGD opt_a(a.params(), {.lr = 0.05, .momentum = 0.9});
  opt_a.use_master_weights();
  amp::GradScaler scaler_a(scaling);
  Tensors losses_a;
  for (const Batch& b : batches) losses_a.push_back(step(a, opt_a, scaler_a, b.x.to(gpu()), b.y.to(gpu())));
  // Captured after 2 eager steps, replayed for the other 10.
  const Mlp g = make_mlp(1, DType::F16);
  optim::SGD opt_g(g.params(), {.lr = 0.05, .momentum = 0.9});
  opt_g.use_master_weights();
  amp::GradScaler scaler_g(scaling);
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{step(g, opt_g, scaler_g, in[0], in[1])}; },
                              {&opt_g, &scaler_g}, {.device = gpu(), .warmup_steps = 2});
  Tensors losses_g;
  for (const Batch& b : batches) losses_g.push_back(clone(captured.run({b.x, b.y})[0]));
  REQUIRE(captured.captured());
  CHECK(captured.graph().replays() == 10);
  require_same_bits(losses_a, losses_g);
  require_same_bits(a.params(), g.params());          // the f16 model
  require_same_bits(opt_a.parameters(), opt_g.parameters());  // the f32 masters
  CHECK(scaler_g.get_scale() == scaler_a.get_scale());
  CHECK(scaler_g.iterations() == 12);
  CHECK(scaler_g.skipped_iterations() == scaler_a.skipped_iterations());
  CHECK(scaler_a.skipped_iterations() > 0);  // the run did exercise the skip
  CHECK(opt_g.step_count() == opt_a.step_count());
  CHECK(opt_a.step_count() == 12 - scaler_a.skipped_iterations());  // the device skips are not counted
  CHECK(opt_g.state(opt_g.parameters()[0])->step == opt_a.state(opt_a.parameters()[0])->step);
  CHECK(opt_g.last_step_skipped() == opt_a.last_step_skipped());
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: autocast's weight cache serves no cast across a capture or its replays", "[cuda][gpu][graph][amp]") {
  // O1's setting: autocast on around everything (an outer region keeps the cache alive), eager
  // forwards between the replays of a captured step that changes the f32 weights. Before: a
  // capture that found a current cast in the cache recorded no cast, so every replay read the
  // weights of the capture's time (the loss stopped moving), and the replays wrote the weights
  // without new versions, so eager forwards were served casts of the old weights.
  const std::vector<Batch> batches = make_batches(1, DType::F32);
  const Tensor x = batches[0].x.to(gpu());
  const Mlp m = make_mlp(4, DType::F32);
  optim::SGD opt(m.params(), {.lr = 0.1});
  amp::Autocast outer({.device = DeviceType::CUDA, .dtype = DType::F16});
  auto eval = [&] {
    NoGradGuard no_grad;
    return bytes_of(m.forward(x, 0.0));
  };
  cuda::CapturedStep captured(
      [&](const Tensors& in) {
        opt.zero_grad();
        const Tensor loss = cross_entropy(m.forward(in[0], 0.0).to(DType::F32), in[1]);
        loss.backward();
        opt.step();
        return Tensors{loss};
      },
      {&opt}, {.device = gpu(), .warmup_steps = 1});
  // The loss a replay returns is computed with the weights it starts from: the eager loss of the
  // same batch just before it (the cache cleared, so those casts are fresh).
  auto eager_loss = [&] {
    NoGradGuard no_grad;
    amp::clear_weight_cache();
    return bytes_of(cross_entropy(m.forward(x, 0.0).to(DType::F32), batches[0].y.to(gpu())));
  };
  (void)captured.run({batches[0].x, batches[0].y});  // the eager warm-up
  (void)m.forward(x, 0.0);  // casts of the current weights under grad mode, as the capture's
  (void)captured.run({batches[0].x, batches[0].y});  // the capture
  REQUIRE(captured.captured());
  for (int i = 0; i < 3; ++i) {
    INFO("replay " << i);
    const auto cached = eval();  // casts the current weights into the cache (no-grad key)
    const auto expected = eager_loss();
    CHECK(bytes_of(captured.run({batches[0].x, batches[0].y})[0]) == expected);
    const auto after = eval();  // the replay changed the weights: not the cached casts of before
    CHECK(after != cached);
    amp::clear_weight_cache();
    CHECK(after == eval());
  }
  test::require_no_pending_cuda_error();
}

// Eight steps of an MLP with the lr set before every step (what a scheduler writes), eagerly and
// as replays of a captured step, each with a fresh optimizer from `make`: the parameters must be
// bitwise equal. Returns the captured run's model and optimizer for further checks.
template <typename Opt, typename Make>
std::pair<Mlp, std::unique_ptr<Opt>> captured_equals_eager(uint64_t seed, double (*lr_at)(int), Make make,
                                                            std::unique_ptr<cuda::CapturedStep>* keep = nullptr) {
  const std::vector<Batch> batches = make_batches(8, DType::F32);
  auto step = [](const Mlp& m, Opt& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(m.forward(x, 0.0), y);
    loss.backward();
    opt.step();
    return loss;
  };
  const Mlp a = make_mlp(seed, DType::F32);
  std::unique_ptr<Opt> opt_a = make(a.params(), lr_at(0));
  for (int i = 0; i < 8; ++i) {
    opt_a->param_groups()[0].set_lr(lr_at(i));
    step(a, *opt_a, batches[std::size_t(i)].x.to(gpu()), batches[std::size_t(i)].y.to(gpu()));
  }
  Mlp g = make_mlp(seed, DType::F32);
  std::unique_ptr<Opt> opt_g = make(g.params(), lr_at(0));
  Opt* og = opt_g.get();
  auto captured = std::make_unique<cuda::CapturedStep>(
      [g, og, step](const Tensors& in) { return Tensors{step(g, *og, in[0], in[1])}; },  // g: tensor handles
      std::vector<GraphParticipant*>{og}, cuda::CapturedStepOptions{.device = gpu(), .warmup_steps = 1});
  for (int i = 0; i < 8; ++i) {
    opt_g->param_groups()[0].set_lr(lr_at(i));
    captured->run({batches[std::size_t(i)].x, batches[std::size_t(i)].y});
  }
  REQUIRE(captured->captured());
  require_same_bits(a.params(), g.params());
  CHECK(opt_g->state(g.w1)->step == 8);  // the device step counts, read back
  CHECK(opt_g->step_count() == 8);
  if (keep) *keep = std::move(captured);
  return {std::move(g), std::move(opt_g)};
}

TEST_CASE("CUDA graph: AdamW with an lr changed before every replay equals the eager steps", "[cuda][gpu][graph]") {
  std::unique_ptr<cuda::CapturedStep> captured;
  auto [g, opt] = captured_equals_eager<optim::AdamW>(
      2, [](int i) { return 1e-3 * (1.0 + 0.5 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = lr, .weight_decay = 0.01}); },
      &captured);
  // A by-value option changed after the capture cannot be followed: a clear error.
  opt->param_groups()[0].set_option("amsgrad", 1.0);
  const std::vector<Batch> batches = make_batches(1, DType::F32);
  MG_REQUIRE_ERROR(captured->run({batches[0].x, batches[0].y}), "changed since the CUDA graph was captured");
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: LAMB with an lr changed before every replay equals the eager steps", "[cuda][gpu][graph]") {
  // LAMB's trust ratios come from stage 1's chunk sums on the device, so its step is capturable.
  captured_equals_eager<optim::LAMB>(
      3, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::LAMB>(p, optim::LAMBOptions{.lr = lr, .weight_decay = 0.01}); });
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: RMSprop and Adagrad with an lr changed before every replay equal the eager steps",
          "[cuda][gpu][graph]") {
  std::unique_ptr<cuda::CapturedStep> captured;
  auto [g, opt] = captured_equals_eager<optim::RMSprop>(
      4, [](int i) { return 1e-3 * (1.0 + 0.5 * i); },
      [](const Tensors& p, double lr) {
        return std::make_unique<optim::RMSprop>(
            p, optim::RMSpropOptions{.lr = lr, .weight_decay = 0.01, .momentum = 0.9, .centered = true});
      },
      &captured);
  // Its kernels run with the buffers of the capture: dropping the momentum buffer's use needs a new capture.
  opt->param_groups()[0].set_option("momentum", 0.0);
  const std::vector<Batch> batches = make_batches(1, DType::F32);
  MG_REQUIRE_ERROR(captured->run({batches[0].x, batches[0].y}), "changed since the CUDA graph was captured");
  // Adagrad's lr decay follows the device step count in every replay.
  captured_equals_eager<optim::Adagrad>(
      5, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) {
        return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = lr, .lr_decay = 0.1, .initial_accumulator_value = 0.1});
      });
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: Adamax, RAdam, NAdam, Adadelta, Rprop and ASGD with an lr changed before every replay equal the eager steps",
          "[cuda][gpu][graph]") {
  // Their step scalars come from the device step count (and NAdam's device mu_product) in every replay;
  // RAdam's rectification starts at step 6 of the 8.
  captured_equals_eager<optim::Adamax>(
      6, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::Adamax>(p, optim::AdamaxOptions{.lr = lr, .weight_decay = 0.01}); });
  captured_equals_eager<optim::RAdam>(
      7, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) {
        return std::make_unique<optim::RAdam>(p, optim::RAdamOptions{.lr = lr, .weight_decay = 0.01, .decoupled_weight_decay = true});
      });
  std::unique_ptr<cuda::CapturedStep> captured;
  auto [g, nadam] = captured_equals_eager<optim::NAdam>(
      8, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::NAdam>(p, optim::NAdamOptions{.lr = lr, .weight_decay = 0.01}); },
      &captured);
  // Replays after the state was read (above) count on the device too, and multiply their mu's into
  // every parameter's product: ten updates, read back from the device.
  const std::vector<Batch> batches = make_batches(2, DType::F32);
  for (const Batch& b : batches) captured->run({b.x, b.y});
  CHECK(nadam->state(g.w1)->step == 10);
  double product = 1.0;
  for (int t = 1; t <= 10; ++t) product = fn::product_rounded(product, fn::nadam_mu(0.9, 4e-3, t));
  CHECK(std::fabs(nadam->state(g.w1)->scalars.at("mu_product") - product) <= 4e-16 * product);
  captured_equals_eager<optim::Adadelta>(
      9, [](int i) { return 0.5 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.lr = lr, .rho = 0.8}); });
  // Rprop's lr only seeds its step sizes; its eta and bounds are read from the device copy.
  captured_equals_eager<optim::Rprop>(
      10, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::Rprop>(p, optim::RpropOptions{.lr = lr, .step_sizes = {1e-4, 0.02}}); });
  // ASGD's eta follows each replay's lr on the device, and its average starts at update 4.
  captured_equals_eager<optim::ASGD>(
      11, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) { return std::make_unique<optim::ASGD>(p, optim::ASGDOptions{.lr = lr, .lambd = 0.05, .t0 = 2}); });
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: Adafactor with an lr changed before every replay equals the eager steps", "[cuda][gpu][graph]") {
  // Its step scalars come from the device step count and the device options, and its sums from the
  // reductions' fixed tree, so a captured step replays the eager bits.
  captured_equals_eager<optim::Adafactor>(
      12, [](int i) { return 1e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) {
        return std::make_unique<optim::Adafactor>(p, optim::AdafactorOptions{.lr = lr, .weight_decay = 0.01});
      });
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: Muon with AdamW groups and an lr changed before every replay equals the eager steps",
          "[cuda][gpu][graph]") {
  // Muon's groups run public ops whose lr, weight decay and skip flag are device values, its AdamW
  // groups the AdamW kernel: nothing read on the host, so the step is captured and replays the eager bits.
  captured_equals_eager<optim::Muon>(
      13, [](int i) { return 2e-2 * (1.0 + 0.25 * i); },
      [](const Tensors& p, double lr) {
        Tensors matrices, rest;
        for (const Tensor& t : p) (t.dim() == 2 ? matrices : rest).push_back(t);
        return std::make_unique<optim::Muon>(
            std::vector<optim::ParamGroupSpec>{{.params = matrices}, {.params = rest, .options = {{"use_muon", 0}}}},
            optim::MuonOptions{.lr = lr, .weight_decay = 0.01});
      });
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: dropout masks differ per replay and equal the eager sequence", "[cuda][gpu][graph]") {
  const Tensor x = ones({1000}, {.device = gpu()});
  auto step = [](const Tensor& in) { return dropout(in, 0.5, true); };
  manual_seed(5);
  Tensors eager;
  for (int i = 0; i < 5; ++i) eager.push_back(step(x));
  const uint64_t eager_offset = default_generator().offset();
  manual_seed(5);
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{step(in[0])}; }, {},
                              {.device = gpu(), .warmup_steps = 1});
  Tensors replayed;
  for (int i = 0; i < 5; ++i) replayed.push_back(clone(captured.run({x})[0]));
  require_same_bits(eager, replayed);
  CHECK(bytes_of(replayed[3]) != bytes_of(replayed[4]));  // each replay draws new masks
  CHECK(default_generator().offset() == eager_offset);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: replays on alternating streams keep the eager dropout sequence", "[cuda][gpu][graph]") {
  // Each replay writes the generator's position into device memory the previous replay read, on
  // the replay's stream; the graph orders that write after the previous replay (an event), and the
  // position's memory is recorded on every replay stream.
  const Tensor x = ones({1 << 20}, {.device = gpu()});
  auto step = [](const Tensor& in) { return dropout(in, 0.5, true); };
  manual_seed(9);
  Tensors eager;
  for (int i = 0; i < 6; ++i) eager.push_back(step(x));
  manual_seed(9);
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{step(in[0])}; }, {},
                              {.device = gpu(), .warmup_steps = 1});
  const cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  cuda::Event read(false);
  Tensors replayed;
  for (int i = 0; i < 6; ++i) {
    const cuda::Stream& s = i % 2 == 0 ? a : b;
    if (i > 0) read.block(s);  // the previous stream's copy of the shared output is done
    cuda::StreamGuard guard(s);
    replayed.push_back(clone(captured.run({x})[0]));
    read.record(s);
  }
  cuda::synchronize();
  require_same_bits(eager, replayed);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: dropout from a generator the graph does not hold is refused", "[cuda][gpu][graph]") {
  // Its (seed, offset) would be frozen into the graph: every replay would drop the same elements.
  const Tensor x = ones({1000}, {.device = gpu()});
  Generator own(11);
  cuda::Graph graph;
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     (void)dropout(x, 0.5, true, &own);
                   }()),
                   "dropout: drew from a generator that is not part of the CUDA graph being captured");
  CHECK_FALSE(cuda::is_capturing());
  // Added before the capture, the same generator is graph-safe.
  cuda::Graph with_own;
  with_own.add_generator(own);
  Tensor y;
  {
    cuda::GraphCapture capture(with_own);
    y = dropout(x, 0.5, true, &own);
  }
  with_own.replay();
  const std::vector<uint8_t> first = bytes_of(y);
  with_own.replay();
  CHECK(bytes_of(y) != first);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: an SGD momentum buffer that would be created inside the capture is refused", "[cuda][gpu][graph]") {
  // Its creation step would be copied again at every replay, restarting the buffer each time.
  Tensor w = to(from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}), gpu()).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.0});
  w.set_grad(full({3}, 1.0, {.device = gpu()}));
  opt.step();
  opt.param_groups()[0].options["momentum"] = 0.9;  // no buffer yet
  cuda::Graph graph;
  graph.add_participant(opt);
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     opt.step();
                   }()),
                   "SGD: optimizer state 'momentum_buffer' would be created inside a CUDA graph capture");
  CHECK_FALSE(cuda::is_capturing());
  // Refused before anything was made: the eager step starts the buffer from zero (buf = grad).
  opt.step();
  const std::vector<double> after_eager = test::values(w);
  CHECK(after_eager[0] == Approx(0.8).epsilon(1e-6));
  CHECK(after_eager[2] == Approx(2.8).epsilon(1e-6));
  {
    cuda::GraphCapture capture(graph);
    opt.step();
  }
  graph.replay();  // buf = 0.9 * 1 + 1 = 1.9: w -= 0.19
  CHECK(test::values(w)[0] == Approx(0.61).epsilon(1e-6));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: to(cpu, non_blocking) in a capture is the registry's error, whatever the pinned cache holds",
          "[cuda][gpu][graph]") {
  // Its pinned output was allocated before the copy asked the registry: with nothing cached,
  // cudaHostAlloc invalidated the capture with a bare CUDA error.
  const Tensor x = ones({1000}, {.device = gpu()});
  for (int cached = 0; cached < 2; ++cached) {
    INFO((cached ? "a block cached" : "an empty cache"));
    cuda::empty_pinned_cache();
    if (cached) (void)empty_pinned({1000}, DType::F32);  // freed at once: cached for the next request
    cuda::Graph graph;
    std::string msg;
    try {
      cuda::GraphCapture capture(graph);
      (void)(x * 2.0).to(Device::cpu(), /*non_blocking=*/true);
    } catch (const CudaError& e) {
      msg = e.what();
    }
    CHECK_THAT(msg, Catch::Matchers::Contains("during a CUDA graph capture"));
    CHECK_FALSE(cuda::is_capturing());
  }
  cuda::empty_pinned_cache();
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: a captured step that synchronises throws, abandons the capture and leaves CUDA usable",
          "[cuda][gpu][graph]") {
  const Tensor x = ones({4}, {.device = gpu()});
  cuda::Graph graph;
  std::string msg;
  try {
    cuda::GraphCapture capture(graph);
    const Tensor y = x * 2.0;
    (void)y.sum().item<float>();  // a blocking device-to-host copy
  } catch (const CudaError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK_THAT(msg, Catch::Matchers::Contains("a blocking device-to-host copy of 4 bytes (item()"));
  CHECK_THAT(msg, Catch::Matchers::Contains("is capturing a CUDA graph on this thread"));
  CHECK_FALSE(cuda::is_capturing());
  CHECK_FALSE(graph.capturing());
  CHECK_FALSE(graph.ready());
  CHECK(cuda::take_pending_error() == "");
  // Usable: eager work, a synchronisation, and a new capture of the same Graph.
  CHECK((x + 1.0).sum().item<float>() == 8.0f);
  cuda::synchronize();
  Tensor y;
  {
    cuda::GraphCapture capture(graph);
    y = x * 3.0;
  }
  graph.replay();
  CHECK(y.sum().item<float>() == 12.0f);
  // cuda::synchronize() inside a capture is refused the same way.
  graph.reset();
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     cuda::synchronize();
                   }()),
                   "cuda::synchronize (cudaDeviceSynchronize) synchronises the host");
  CHECK_FALSE(cuda::is_capturing());
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: state the graph would freeze is refused with a clear error", "[cuda][gpu][graph]") {
  const Mlp m = make_mlp(4, DType::F32);
  optim::SGD opt(m.params(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = ones({16, 32}, {.device = gpu()});
  const Tensor y = zeros({16}, {.dtype = DType::I64, .device = gpu()});
  cross_entropy(m.forward(x, 0.0), y).backward();  // gradients, but no optimizer state yet
  cuda::Graph graph;
  graph.add_participant(opt);
  MG_REQUIRE_ERROR(([&] { cuda::GraphCapture capture(graph); }()), "run at least one eager step (warm-up) before capturing");
  opt.step();
  opt.set_step_gate([](optim::Optimizer&) { return true; });
  MG_REQUIRE_ERROR(([&] { cuda::GraphCapture capture(graph); }()), "while it has a step gate");
  opt.set_step_gate(nullptr);
  // randn inside a captured step would repeat at every replay.
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     (void)randn({4}, {.device = gpu()});
                   }()),
                   "drew random numbers during a CUDA graph capture");
  CHECK_FALSE(cuda::is_capturing());
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: load_state_dict between replays", "[cuda][gpu][graph]") {
  const std::vector<Batch> batches = make_batches(6, DType::F32);
  auto step = [](const Mlp& m, optim::SGD& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(m.forward(x, 0.0), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  const Mlp m = make_mlp(5, DType::F32);
  optim::SGD opt(m.params(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 256.0, .growth_interval = 1000});
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{step(m, opt, scaler, in[0], in[1])}; },
                              {&opt, &scaler}, {.device = gpu(), .warmup_steps = 1});
  for (int i = 0; i < 3; ++i) captured.run({batches[std::size_t(i)].x, batches[std::size_t(i)].y});
  REQUIRE(captured.graph().replays() == 2);
  // The scaler's loaded state lands in the buffer the graph holds: the replays go on from it.
  StateDict s = scaler.state_dict();
  s.floats["scale"] = 1024.0;
  scaler.load_state_dict(s);
  captured.run({batches[3].x, batches[3].y});
  CHECK(captured.graph().replays() == 3);
  CHECK(scaler.get_scale() == 1024.0);  // no overflow at this scale, growth_interval not reached
  CHECK(scaler.iterations() == s.ints.at("iterations") + 1);
  // Other options than the graph was captured with: refused at the next replay.
  s = scaler.state_dict();
  s.ints["growth_interval"] = 7;
  scaler.load_state_dict(s);
  MG_REQUIRE_ERROR(captured.run({batches[4].x, batches[4].y}),
                   "GradScaler: load_state_dict changed its options");
  // Refused until captured again, also after loading the captured options back.
  s.ints["growth_interval"] = 1000;
  scaler.load_state_dict(s);
  MG_REQUIRE_ERROR(captured.run({batches[4].x, batches[4].y}), "GradScaler: load_state_dict changed its options");
  // The optimizer's state tensors are new ones after loading: the graph would update the old ones.
  opt.load_state_dict(opt.state_dict());
  MG_REQUIRE_ERROR(captured.run({batches[5].x, batches[5].y}),
                   "SGD: load_state_dict replaced the optimizer state after the CUDA graph was captured");
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: a module's load_state_dict between replays is what the next replay computes with",
          "[cuda][gpu][graph]") {
  // Module::load_state_dict copies into the parameters' memory, whose addresses the graph holds.
  nn::Linear layer({.in = 32, .out = 10});
  layer.to(gpu());
  const void* address = layer.weight.data_ptr();
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{layer.forward(in[0])}; }, {},
                              {.device = gpu(), .warmup_steps = 1});
  const std::vector<Batch> batches = make_batches(4, DType::F32);
  NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) captured.run({batches[std::size_t(i)].x});
  REQUIRE(captured.graph().replays() == 2);
  nn::Linear other({.in = 32, .out = 10});  // other values, on the CPU: moved and copied in
  layer.load_state_dict(other.state_dict());
  CHECK(layer.weight.data_ptr() == address);
  const Tensor y = clone(captured.run({batches[3].x})[0]);
  CHECK(captured.graph().replays() == 3);
  CHECK(bytes_of(y) == bytes_of(layer.forward(batches[3].x.to(gpu()))));  // the eager step on the loaded weights
  const std::vector<double> got = test::values(y), want = test::values(other.forward(batches[3].x));
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) < 1e-4 * (1.0 + std::abs(want[i])));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: a capture abandoned in the middle of a scaled step leaves the scaler and optimizer usable",
          "[cuda][gpu][graph]") {
  Tensor w = to(from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}), gpu()).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 256.0});
  auto begin_iteration = [&] {
    opt.zero_grad();
    scaler.scale((w * w).sum()).backward();
    scaler.step(opt);
  };
  begin_iteration();
  scaler.update();  // eager: the scaler's and the optimizer's device state exist
  cuda::Graph graph;
  graph.add_participant(opt);
  graph.add_participant(scaler);
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     begin_iteration();  // unscale and step recorded, never run
                     throw Error("the user's step failed before update()");
                   }()),
                   "the user's step failed before update()");
  CHECK_FALSE(cuda::is_capturing());
  // The abandoned iteration is forgotten: no "already stepped", flags and statistics readable.
  begin_iteration();
  scaler.update();
  CHECK_FALSE(opt.last_step_skipped());
  CHECK(scaler.skipped_iterations() == 0);
  CHECK(scaler.iterations() == 2);
  // w after two eager momentum steps on grad 2w: the captured one never ran.
  const double w1 = 1.0 - 0.1 * 2.0, w2 = w1 - 0.1 * (0.9 * 2.0 + 2.0 * w1);
  CHECK(test::values(w)[0] == Approx(w2).epsilon(1e-6));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: interpolate and reflect pad replay equal to eager (their index tables made by the warm-up)",
          "[cuda][gpu][graph]") {
  // Their index and weight tables are built on the host and copied once per shape (a capture
  // refuses host copies): the warm-up step makes them, the capture reuses them.
  manual_seed(9);
  const Tensor x = randn({2, 3, 5, 7}, {.device = gpu()});
  auto step = [](const Tensor& in) {
    const Tensor up = interpolate(in, {.scale_factor = {1.5}, .mode = InterpolateMode::Bilinear});
    return pad(up, {2, 1, 1, 2}, PadMode::Reflect);
  };
  const Tensor eager = step(x);
  cuda::CapturedStep captured([&](const Tensors& in) { return Tensors{step(in[0])}; }, {},
                              {.device = gpu(), .warmup_steps = 1});
  for (int i = 0; i < 3; ++i) require_same_bits({eager}, {clone(captured.run({x})[0])});
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: mg::checkpoint inside a capture is refused with the checkpoint's own error",
          "[cuda][gpu][graph][checkpoint]") {
  const Tensor x = randn({2, 3}, {.device = gpu()}).requires_grad_();
  for (const bool reentrant : {false, true}) {
    cuda::Graph graph;
    MG_REQUIRE_ERROR(([&] {
                       cuda::GraphCapture capture(graph);
                       (void)checkpoint([](const Tensors& in) { return Tensors{in[0] * 2.0}; }, {x}, {.reentrant = reentrant});
                     }()),
                     "checkpoint: activation checkpointing is not supported inside a CUDA graph capture");
  }
  test::require_no_pending_cuda_error();
}
