// mg_dist_worker's ZeroRedundantOptimizer modes (one process per rank, started by mixgrad-run;
// tests/distributed/test_zero.cpp reads their output). Each prints "rank R: zero <mode> N checks
// passed" at the end, or "rank R: FAIL ..." and exits 1 at the first failed check.
//   zero-equivalence  DDP + ZeRO against DDP + the same unsharded optimizer, in the same process:
//                     SGD, Adam with two groups, AdamW, LAMB in f64; AdamW at O2 bf16 through
//                     amp::scale_loss; SGD at O2 f16 through GradScaler; AdamW at O1 bf16 —
//                     bitwise equal weights; with ZeRO's clip, equal to the unsharded clip to
//                     rounding; replicas equal; each rank's optimizer state about 1/W of it
//   zero-state        the consolidated state dict equals the unsharded optimizer's (f64 Adam
//                     with two groups, O2 bf16 AdamW with masters and a GradScaler), on every rank or on one; loading an unsharded
//                     dict into ZeRO continues bitwise as the unsharded optimizer does
//   zero-inf          an inf gradient in one rank's shard makes every rank skip, scales equal
//   zero-mismatch     ranks that pass different parameters get an error naming the difference;
//                     DDP refuses a ZeRO shard's masters in DdpOptions::optimizers
//   zero-frozen       with a frozen layer: bitwise DDP's weights, and each step broadcasts the
//                     trainable parameters only; unfrozen later, the layer is sent again
// Decision: as in ddp_scenarios.cpp, the reference runs inside each rank on the same data.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "worker_check.h"
#include "worker_tensors.h"
#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "distributed/ddp.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "distributed/zero.h"
#include "nn/linear.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace mg;
using namespace mg::distributed;

namespace {

using worker_check::check;
using worker_check::fail;
using worker_check::g_checks;
using worker_check::g_rank;

// 8 -> 24 -> 16 -> 4 with tanh: six parameters of six sizes, so the partition is uneven.
struct Net : nn::Module {
  Net() {
    fc1 = register_module<nn::Linear>("fc1", {.in = 8, .out = 24});
    fc2 = register_module<nn::Linear>("fc2", {.in = 24, .out = 16});
    fc3 = register_module<nn::Linear>("fc3", {.in = 16, .out = 4});
  }
  Tensor operator()(const Tensor& x) { return (*fc3)((*fc2)((*fc1)(x).tanh()).tanh()); }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

std::shared_ptr<Net> make_net(DType dtype, uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<Net>();
  m->to(dtype);
  return m;
}

constexpr int64_t kB = 5;  // rows per rank

// Step s's global batch (x [W*kB, 8], y [W*kB, 4]); rank r uses rows [r*kB, (r+1)*kB).
std::pair<Tensor, Tensor> batch(int step, int world, DType dtype) {
  manual_seed(500 + uint64_t(step));
  return {randn({world * kB, 8}).to(dtype), randn({world * kB, 4}).to(dtype)};
}

using worker_check::bitwise_equal;
using worker_check::gather;
using worker_check::rel_diff;
using worker_check::replicas_equal;

struct Config {
  std::string name;
  DType dtype = DType::F64;
  std::string optimizer = "sgd";  // sgd | adam2 (two groups) | adamw | lamb
  std::string opt_level;          // "" | O1 | O2 (amp::initialize)
  std::string amp_dtype = "bf16";
  bool grad_scaler = false;       // GradScaler (unscale_, step, update) instead of amp::scale_loss
  bool clip = false;              // clip the gradient norm to 0.5 before each step
};

// The groups an optimizer is built from: one, or (adam2) the weights and the biases apart.
std::vector<optim::ParamGroupSpec> groups_of(const Config& c, Net& net) {
  if (c.optimizer != "adam2") return {{.params = net.parameters()}};
  return {{.params = {net.fc1->weight, net.fc2->weight, net.fc3->weight}},
          {.params = {net.fc1->bias, net.fc2->bias, net.fc3->bias}, .options = {{"lr", 3e-2}, {"weight_decay", 0.0}}}};
}

std::unique_ptr<optim::Optimizer> make_opt(const Config& c, const std::vector<optim::ParamGroupSpec>& groups) {
  if (c.optimizer == "adam2") return std::make_unique<optim::Adam>(groups, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
  if (c.optimizer == "lamb") return std::make_unique<optim::LAMB>(groups, optim::LAMBOptions{.lr = 1e-2});
  return std::make_unique<optim::SGD>(groups, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
}

// A training run of `steps` steps on this rank's rows under DDP, with ZeRO or with the plain
// optimizer; the objects stay alive in it for the caller's checks.
struct Run {
  std::shared_ptr<Net> net;
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundantOptimizer> zero;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<amp::GradScaler> scaler;
  optim::Optimizer& opt() { return zero ? zero->local() : *plain; }
};

void setup(Run& run, const Config& c, const std::shared_ptr<ProcessGroup>& pg, bool use_zero, uint64_t seed) {
  run.net = make_net(c.dtype, seed);
  const auto groups = groups_of(c, *run.net);
  if (use_zero) {
    run.zero = std::make_unique<ZeroRedundantOptimizer>(groups, pg, [&](const auto& shard) { return make_opt(c, shard); });
  } else {
    run.plain = make_opt(c, groups);
  }
  if (!c.opt_level.empty()) {
    amp::initialize_models({run.net}, {&run.opt()}, {.opt_level = c.opt_level, .dtype = c.amp_dtype, .verbosity = 0});
  }
  DdpOptions o;
  if (!use_zero) o.optimizers = {run.plain.get()};
  run.ddp = std::make_unique<DistributedDataParallel>(run.net, pg, o);
  if (c.grad_scaler) run.scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{.init_scale = 256});
}

void train(Run& run, const Config& c, ProcessGroup& pg, int first_step, int steps) {
  const int rank = pg.rank(), world = pg.world_size();
  for (int s = first_step; s < first_step + steps; ++s) {
    auto [x, y] = batch(s, world, c.dtype);
    x = x.narrow(0, rank * kB, kB);
    y = y.narrow(0, rank * kB, kB);
    optim::Optimizer& opt = run.opt();
    opt.zero_grad();
    const Tensor out = c.opt_level.empty() ? (*run.net)(x) : amp::forward(*run.net, x);
    const Tensor loss = mse_loss(out.to(c.dtype), y);
    const auto clip = [&] {
      if (!c.clip) return;
      if (run.zero) run.zero->clip_grad_norm_(0.5);
      else optim::clip_grad_norm_(opt.parameters(), 0.5);
    };
    if (run.scaler) {
      run.scaler->scale(loss).backward();
      run.scaler->unscale_(opt);
      clip();
      run.scaler->step(opt);
      run.scaler->update();
    } else if (!c.opt_level.empty()) {
      amp::scale_loss(loss, opt).backward();
      clip();
      opt.step();
    } else {
      loss.backward();
      clip();
      opt.step();
    }
  }
}

int equivalence(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank(), world = pg->world_size();
  const std::vector<Config> configs = {
      {.name = "f64 sgd nesterov"},
      {.name = "f64 adam two groups", .optimizer = "adam2"},
      {.name = "f64 adamw", .optimizer = "adamw"},
      {.name = "f64 lamb", .optimizer = "lamb"},
      {.name = "f64 adamw clip", .optimizer = "adamw", .clip = true},
      {.name = "O1 bf16 adamw", .dtype = DType::F32, .optimizer = "adamw", .opt_level = "O1"},
      {.name = "O2 bf16 adamw scale_loss", .dtype = DType::F32, .optimizer = "adamw", .opt_level = "O2"},
      {.name = "O2 f16 sgd GradScaler clip", .dtype = DType::F32, .opt_level = "O2", .amp_dtype = "f16",
       .grad_scaler = true, .clip = true},
  };
  constexpr int kSteps = 4;
  for (const Config& c : configs) {
    Run ref, z;
    setup(ref, c, pg, false, 11);
    train(ref, c, *pg, 0, kSteps);
    if (!c.opt_level.empty()) amp::reset();
    // Each rank starts from other weights: ZeRO broadcasts rank 0's.
    setup(z, c, pg, true, rank == 0 ? 11 : 40 + uint64_t(rank));
    train(z, c, *pg, 0, kSteps);
    if (!c.opt_level.empty()) amp::reset();
    const Tensors a = z.net->parameters(), b = ref.net->parameters();
    const double d = rel_diff(a, b);
    const int64_t mine = z.zero->local().state_bytes(), full = ref.plain->state_bytes();
    std::printf("rank %d: %s: owns %zu of %zu parameters; optimizer state %lld of %lld bytes; max relative difference "
                "to DDP alone %.3g\n",
                rank, c.name.c_str(), z.zero->owned_positions().size(), a.size(), (long long)mine, (long long)full, d);
    if (c.clip) {
      check(d <= (c.dtype == DType::F64 ? 1e-12 : 1e-2), c.name + ": ZeRO's clip differs from the unsharded clip by " +
                                                              std::to_string(d));
    } else {
      check(bitwise_equal(a, b), c.name + ": the ZeRO-trained weights differ from DDP's with the same optimizer (" +
                                     std::to_string(d) + ")");
    }
    check(replicas_equal(*pg, a), c.name + ": the replicas differ");
    check(z.zero->local().parameters().size() == z.zero->owned_positions().size(), c.name + ": the shard's size");
    // Every rank's state together is the whole state, and no rank holds much more than its share.
    const std::vector<double> all = gather(*pg, double(mine));
    double sum = 0, most = 0;
    for (double v : all) sum += v, most = std::max(most, v);
    check(sum == double(full), c.name + ": the ranks' state bytes do not add up to the unsharded optimizer's");
    check(world == 1 || most < 0.8 * double(full), c.name + ": a rank holds most of the state");
  }
  pg->shutdown();
  std::printf("rank %d: zero equivalence %d checks passed\n", rank, g_checks);
  return 0;
}

bool same_state(const StateDict& a, const StateDict& b, std::string* why) {
  if (a.ints != b.ints) return *why = "integers", false;
  if (a.strings != b.strings) return *why = "strings", false;
  if (a.floats.size() != b.floats.size()) return *why = "float count", false;
  for (const auto& [k, v] : a.floats) {
    const auto it = b.floats.find(k);
    if (it == b.floats.end() || std::memcmp(&v, &it->second, sizeof v)) return *why = "float " + k, false;
  }
  if (a.tensors.size() != b.tensors.size()) {
    return *why = "tensor count " + std::to_string(a.tensors.size()) + " vs " + std::to_string(b.tensors.size()), false;
  }
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].first != b.tensors[i].first) return *why = "tensor name " + a.tensors[i].first, false;
    if (!bitwise_equal({a.tensors[i].second}, {b.tensors[i].second})) return *why = "tensor " + a.tensors[i].first, false;
  }
  return true;
}

int state(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  for (const Config& c : {Config{.name = "f64 adam two groups", .optimizer = "adam2"},
                          Config{.name = "O2 bf16 adamw", .dtype = DType::F32, .optimizer = "adamw", .opt_level = "O2",
                                 .grad_scaler = true}}) {
    Run ref, z;
    setup(ref, c, pg, false, 3);
    train(ref, c, *pg, 0, 3);
    setup(z, c, pg, true, 3);
    train(z, c, *pg, 0, 3);
    const StateDict expected = ref.plain->state_dict();
    std::string why;
    const StateDict everywhere = z.zero->state_dict();
    check(same_state(everywhere, expected, &why), c.name + ": the consolidated state differs in " + why);
    const StateDict on_last = z.zero->state_dict(pg->world_size() - 1);
    if (rank == pg->world_size() - 1) {
      check(same_state(on_last, expected, &why), c.name + ": the state gathered on the last rank differs in " + why);
    } else {
      check(on_last.tensors.empty() && on_last.ints.empty(), c.name + ": a rank other than 'to' got a state");
    }
    // A ZeRO optimizer loads the unsharded state (fresh, trained from other weights) and then
    // trains on exactly as the unsharded optimizer does.
    Run z2;
    setup(z2, c, pg, true, 77);
    train(z2, c, *pg, 10, 1);
    for (std::size_t i = 0; i < z2.net->parameters().size(); ++i) {
      NoGradGuard no_grad;
      Tensor(z2.net->parameters()[i]).copy_(ref.net->parameters()[i]);
    }
    z2.zero->load_state_dict(expected);
    train(ref, c, *pg, 3, 2);
    train(z2, c, *pg, 3, 2);
    check(bitwise_equal(z2.net->parameters(), ref.net->parameters()),
          c.name + ": after loading the unsharded state, ZeRO trains on differently");
    check(same_state(z2.zero->state_dict(), ref.plain->state_dict(), &why), c.name + ": the states part after loading: " + why);
    // A state of another layout is refused before anything changes.
    StateDict bad = expected;
    bad.ints["num_params"] = 5;
    std::string what;
    try {
      z2.zero->load_state_dict(bad);
    } catch (const Error& e) {
      what = e.what();
    }
    check(what.find("the state has 5 parameters but the ZeroRedundantOptimizer has 6") != std::string::npos,
          c.name + ": expected the parameter-count refusal, got: " + what);
    // A state only the last rank's shard refuses (a buffer of the wrong shape at a position it
    // owns): every rank throws, and none has changed.
    const int last = pg->world_size() - 1;
    int64_t position = -1;
    for (std::size_t i = 0; i < z2.zero->owners().size(); ++i) {
      if (z2.zero->owners()[i] == last) position = int64_t(i);
    }
    StateDict odd = expected;
    for (auto& [key, t] : odd.tensors) {
      if (key == "state." + std::to_string(position) + ".exp_avg") t = zeros({7}, {.dtype = t.dtype()});
    }
    const StateDict before = z2.zero->state_dict();
    what.clear();
    try {
      z2.zero->load_state_dict(odd);
    } catch (const Error& e) {
      what = e.what();
    }
    const std::string expect = rank == last ? "'state." : "load_state_dict failed on rank " + std::to_string(last);
    check(what.find(expect) != std::string::npos, c.name + ": expected '" + expect + "' in the refusal, got: " + what);
    check(same_state(z2.zero->state_dict(), before, &why), c.name + ": a refused load changed the state: " + why);
    if (!c.opt_level.empty()) amp::reset();
  }
  pg->shutdown();
  std::printf("rank %d: zero state %d checks passed\n", rank, g_checks);
  return 0;
}

int inf_agreement(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank(), world = pg->world_size();
  auto net = make_net(DType::F32, 5);
  ZeroRedundantOptimizer zero(net->parameters(), pg, [](const auto& shard) {
    return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1});
  });
  amp::GradScaler scaler({.init_scale = 1024});
  // The last parameter's owner is not rank 0 (6 parameters over 2 or 3 ranks).
  const int owner = zero.owners().back();
  int steps = 0;
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = batch(s, world, DType::F32);
    zero.local().zero_grad();
    // No DDP (whose own agreement would hide ZeRO's): every rank computes the whole batch, so
    // the gradients are equal everywhere, and only the owner unscales the inf.
    scaler.scale(mse_loss((*net)(x), y)).backward();
    if (s == 1) net->parameters().back().grad().data<float>()[0] = INFINITY;  // on every rank
    steps += scaler.step(zero.local()) ? 1 : 0;
    scaler.update();
  }
  const std::vector<double> scales = gather(*pg, scaler.get_scale());
  const std::vector<double> stepped = gather(*pg, double(steps));
  std::printf("rank %d: the inf in rank %d's shard: steps %g / %g, scales %g / %g\n", rank, owner, stepped[0],
              stepped[1], scales[0], scales[1]);
  check(owner != 0, "the test needs the inf outside rank 0's shard");
  for (int r = 0; r < world; ++r) {
    check(stepped[std::size_t(r)] == 2 && scales[std::size_t(r)] == 512, "every rank must skip step 1 and back off");
  }
  check(replicas_equal(*pg, net->parameters()), "the replicas must stay equal");
  pg->shutdown();
  std::printf("rank %d: zero inf %d checks passed\n", rank, g_checks);
  return 0;
}

int mismatch(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  const auto sgd = [](const auto& shard) { return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1}); };
  {
    // Rank 1 builds fc2 with another width.
    manual_seed(1);
    Tensors params = {randn({4, 3}).requires_grad_(), randn({rank == 1 ? 6 : 5}).requires_grad_(),
                      randn({2}).requires_grad_()};
    std::string what;
    try {
      ZeroRedundantOptimizer zero(params, pg, sgd);
    } catch (const DistributedError& e) {
      what = e.what();
    }
    std::printf("rank %d: %s\n", rank, what.c_str());
    check(what.find("the ranks' parameters differ") != std::string::npos &&
              what.find("first difference, entry 1:") != std::string::npos && what.find("[6] f32") != std::string::npos,
          "expected an error naming the differing parameter");
  }
  for (const bool equal_shards : {false, true}) {
    // DDP refuses a ZeRO shard's master weights in DdpOptions::optimizers (each rank has its own),
    // also when every rank's shard has the same number and sizes of masters: two equal layers
    // over 2 ranks give each rank one [8, 8] weight and one [8] bias, of different layers.
    struct Twin : nn::Module {
      Twin() {
        a = register_module<nn::Linear>("a", {.in = 8, .out = 8});
        b = register_module<nn::Linear>("b", {.in = 8, .out = 8});
      }
      std::shared_ptr<nn::Linear> a, b;
    };
    manual_seed(2);
    std::shared_ptr<nn::Module> net = equal_shards ? std::shared_ptr<nn::Module>(std::make_shared<Twin>())
                                                   : std::shared_ptr<nn::Module>(make_net(DType::F32, 2));
    ZeroRedundantOptimizer zero(net->parameters(), pg, sgd);
    amp::initialize_models({net}, {&zero.local()}, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
    std::string what;
    try {
      DistributedDataParallel ddp(net, pg, {.optimizers = {&zero.local()}});
    } catch (const DistributedError& e) {
      what = e.what();
    }
    amp::reset();
    std::printf("rank %d: equal shards %d: %s\n", rank, int(equal_shards), what.c_str());
    check(what.find("first difference") != std::string::npos && what.find("optimizer 0 (SGD): ") != std::string::npos &&
              what.find("leave it out of DdpOptions::optimizers") != std::string::npos,
          "expected DDP to refuse the shard's masters, got: " + what);
  }
  {
    // The factory throws on rank 1 only: every rank throws (rank 1 its own error, the others a
    // DistributedError naming rank 1), none goes on to a collective the others never join.
    auto net = make_net(DType::F32, 3);
    std::string what;
    try {
      ZeroRedundantOptimizer zero(net->parameters(), pg, [rank](const auto& shard) -> std::unique_ptr<optim::Optimizer> {
        MG_CHECK(rank != 1, Error, "test factory: no optimizer on rank 1");
        return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1});
      });
    } catch (const Error& e) {
      what = e.what();
    }
    std::printf("rank %d: factory: %s\n", rank, what.c_str());
    check(rank == 1 ? what.find("test factory: no optimizer on rank 1") != std::string::npos
                    : what.find("the optimizer factory failed on rank 1") != std::string::npos,
          "expected every rank to throw after the factory failed on rank 1, got: " + what);
  }
  {
    // A step that throws on rank 1 only (an option its shard refuses): rank 1 still takes part in
    // the broadcast, so rank 0 is not left waiting in it; rank 1 reports its error, and every rank
    // ends with the same parameters (rank 1's shard unchanged).
    auto net = make_net(DType::F32, 4);
    ZeroRedundantOptimizer zero(net->parameters(), pg, sgd);
    const Tensors params = net->parameters();
    for (const Tensor& p : params) p.set_grad(ones_like(p));
    if (rank == 1) zero.local().param_groups()[0].options["lr"] = -1.0;
    std::string what;
    try {
      zero.local().step();
    } catch (const Error& e) {
      what = e.what();
    }
    std::printf("rank %d: failed step: %s\n", rank, what.c_str());
    check(rank == 1 ? what.find("lr") != std::string::npos : what.empty(),
          "expected the step to throw on rank 1 only, got: " + what);
    check(replicas_equal(*pg, params), "the replicas must stay equal after a step that failed on one rank");
  }
  // The group still works.
  auto net = make_net(DType::F32, rank + 1);
  ZeroRedundantOptimizer zero(net->parameters(), pg, sgd);
  check(replicas_equal(*pg, net->parameters()), "the construction did not broadcast rank 0's parameters");
  pg->shutdown();
  std::printf("rank %d: zero mismatch %d checks passed\n", rank, g_checks);
  return 0;
}

// Forwards every collective to `inner` and counts the elements broadcast (what ZeRO sends).
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner) : inner_(std::move(inner)) {}
  using ProcessGroup::all_reduce;
  using ProcessGroup::reduce_scatter;
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend() const override { return inner_->backend(); }
  void all_reduce(Tensor& t, ReduceOp op) override { inner_->all_reduce(t, op); }
  void broadcast(Tensor& t, int root) override {
    broadcast_elements += t.numel();
    inner_->broadcast(t, root);
  }
  Tensor all_gather(const Tensor& t) override { return inner_->all_gather(t); }
  Tensor reduce_scatter(const Tensor& t, ReduceOp op) override { return inner_->reduce_scatter(t, op); }
  void barrier() override { inner_->barrier(); }
  void shutdown() override { inner_->shutdown(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  int64_t broadcast_elements = 0;

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

int frozen(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  auto counting = std::make_shared<CountingGroup>(pg);
  const Config c{.name = "f64 sgd, fc1 frozen"};
  const auto freeze = [](Net& net, bool frozen) {
    for (Tensor p : net.fc1->parameters()) p.requires_grad_(!frozen);
  };
  Run ref, z;
  ref.net = make_net(c.dtype, 11);
  freeze(*ref.net, true);
  ref.plain = make_opt(c, groups_of(c, *ref.net));
  ref.ddp = std::make_unique<DistributedDataParallel>(ref.net, pg, DdpOptions{.optimizers = {ref.plain.get()}});
  z.net = make_net(c.dtype, rank == 0 ? 11 : 40 + uint64_t(rank));
  freeze(*z.net, true);
  z.zero = std::make_unique<ZeroRedundantOptimizer>(groups_of(c, *z.net), counting,
                                                    [&](const auto& shard) { return make_opt(c, shard); });
  z.ddp = std::make_unique<DistributedDataParallel>(z.net, pg);
  int64_t trainable = 0, all = 0;
  for (const Tensor& p : z.net->parameters()) (p.requires_grad() ? trainable : all) += p.numel();
  all += trainable;
  constexpr int kSteps = 3;
  train(ref, c, *pg, 0, kSteps);
  const int64_t before = counting->broadcast_elements;
  train(z, c, *pg, 0, kSteps);
  const int64_t per_step = (counting->broadcast_elements - before) / kSteps;
  std::printf("rank %d: %s: %lld of %lld parameter elements broadcast per step\n", rank, c.name.c_str(),
              (long long)per_step, (long long)all);
  check(bitwise_equal(z.net->parameters(), ref.net->parameters()), c.name + ": the weights differ from DDP's");
  check(replicas_equal(*pg, z.net->parameters()), c.name + ": the replicas differ");
  check(per_step == trainable, c.name + ": expected the " + std::to_string(trainable) +
                                   " trainable elements broadcast per step, got " + std::to_string(per_step));
  // Unfrozen after construction: its owner steps fc1 and sends it (equal gradients on every rank
  // here, without DDP, which averages only what was trainable when it was built).
  freeze(*z.net, false);
  const Tensor fc1_before = z.net->fc1->weight.clone();
  const Tensors params = z.net->parameters();
  for (const Tensor& p : params) p.set_grad(full_like(p, 0.25));
  const int64_t before_unfrozen = counting->broadcast_elements;
  z.zero->local().step();
  check(counting->broadcast_elements - before_unfrozen == all, "unfrozen: every parameter must be broadcast");
  check(!bitwise_equal({z.net->fc1->weight}, {fc1_before}), "unfrozen: fc1 did not change");
  check(replicas_equal(*pg, params), "unfrozen: the replicas differ");
  pg->shutdown();
  std::printf("rank %d: zero frozen %d checks passed\n", rank, g_checks);
  return 0;
}

}  // namespace

int zero_scenario(const std::string& mode, std::chrono::milliseconds timeout) {
  if (const char* r = std::getenv("RANK")) g_rank = std::atoi(r);
  if (mode == "zero-equivalence") return equivalence(timeout);
  if (mode == "zero-state") return state(timeout);
  if (mode == "zero-inf") return inf_agreement(timeout);
  if (mode == "zero-mismatch") return mismatch(timeout);
  if (mode == "zero-frozen") return frozen(timeout);
  return -1;
}
