// mg_dist_worker's DistributedDataParallel modes (one process per rank, started by mixgrad-run;
// tests/distributed/test_ddp.cpp reads their output). Each prints "rank R: ddp <mode> N checks
// passed" at the end, or "rank R: FAIL ..." and exits 1 at the first failed check.
//   ddp-equivalence  2 ranks x batch B against 1 process x batch 2B (computed in the same
//                    process): SGD and AdamW in f64 and f32 at O0, O1 bf16, O2 f16 and bf16
//                    (dynamic loss scale; f32 reduction); small buckets against one bucket,
//                    bitwise; the replicas bitwise equal; a run without communication differs
//   ddp-overlap      several buckets: one launched from a hook started before backward ended
//   ddp-no-sync      gradient accumulation under no_sync equals one large batch
//   ddp-unused       find_unused_parameters on (zeros contributed, a globally unused parameter
//                    keeps no gradient) and off (every rank names the parameter; no hang)
//   ddp-mismatch     rank 1's model differs in a shape, then in the number of parameters; a
//                    frozen parameter is broadcast; an f16 average does not overflow in the sum
//   ddp-inf          an inf gradient on one rank makes every rank skip; scales stay equal
//                    (GradScaler and amp::scale_loss); without agreement they diverge
//   ddp-save PATH    trains 3 steps with 2 ranks; rank 0 writes a checkpoint
//   ddp-load PATH    (one process) loads it and compares with 3 steps of 1 x 2B
// Decision: the single-process reference runs inside each rank (the data are functions of a
// seed), so a rank checks its own result without a second channel.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "worker_check.h"
#include "worker_tensors.h"
#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "distributed/ddp.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "io/checkpoint.h"
#include "nn/linear.h"
#include "ops/checkpoint.h"
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

// A 3-layer tanh MLP 8 -> 32 -> 32 -> 4 (an optional extra head, used or not per step).
struct Mlp : nn::Module {
  explicit Mlp(int64_t hidden = 32, bool extra = false) {
    fc1 = register_module<nn::Linear>("fc1", {.in = 8, .out = hidden});
    fc2 = register_module<nn::Linear>("fc2", {.in = hidden, .out = hidden});
    fc3 = register_module<nn::Linear>("fc3", {.in = hidden, .out = 4});
    if (extra) head = register_module<nn::Linear>("head", {.in = hidden, .out = 4});
  }
  // x [N, 8] -> [N, 4]; use_head adds head(h) (a parameter only some steps or ranks use);
  // `checkpointed`: fc1 and fc2, then fc3, run under mg::checkpoint (in the form `form` says). In
  // the reentrant form every gradient comes from a nested backward (the first DDP hook fires
  // inside one), and the reduction must still wait for the end of the outer backward.
  Tensor forward(const Tensor& x, bool use_head = false) {
    auto body = [this](const Tensors& in) { return Tensors{(*fc2)((*fc1)(in[0]).tanh()).tanh()}; };
    const Tensor h = checkpointed ? checkpoint(body, {x}, form)[0] : body({x})[0];
    auto last = [this](const Tensors& in) { return Tensors{(*fc3)(in[0])}; };
    Tensor y = checkpointed ? checkpoint(last, {h}, form)[0] : last({h})[0];
    if (use_head) y = y + (*head)(h);
    return y;
  }
  Tensor operator()(const Tensor& x) { return forward(x); }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, head;
  bool checkpointed = false;
  CheckpointOptions form;
};

std::shared_ptr<Mlp> make_mlp(DType dtype, uint64_t seed, bool extra = false) {
  manual_seed(seed);
  auto m = std::make_shared<Mlp>(32, extra);
  m->to(dtype);
  return m;
}

// Step s's global batch of 2B (x [2B, 8], y [2B, 4]) in `dtype`; rank r uses rows [rB, rB + B).
std::pair<Tensor, Tensor> batch(int step, int64_t rows, DType dtype) {
  manual_seed(1000 + uint64_t(step));
  Tensor x = randn({rows, 8}).to(dtype);
  Tensor y = randn({rows, 4}).to(dtype);
  return {x, y};
}

double rel_diff(const nn::Module& a, const nn::Module& b) { return worker_check::rel_diff(a.parameters(), b.parameters()); }
bool bitwise_equal(const nn::Module& a, const nn::Module& b) {
  return worker_check::bitwise_equal(a.parameters(), b.parameters());
}
bool replicas_equal(ProcessGroup& pg, const nn::Module& m) { return worker_check::replicas_equal(pg, m.parameters()); }
using worker_check::gather;

struct Config {
  std::string name;
  DType dtype = DType::F64;
  std::string optimizer = "sgd";   // sgd | adamw
  std::string opt_level;           // "": plain; "O1"/"O2" through amp::initialize
  std::string amp_dtype = "bf16";
  int64_t bucket_cap = int64_t(25) << 20;
  std::optional<DType> reduce_dtype;
  double tol = 1e-12;
  bool checkpointed = false;  // the layers under mg::checkpoint
  bool reentrant = false;     // ... in its reentrant form
};

constexpr int kSteps = 4;
constexpr int64_t kB = 6;  // rows per rank

std::unique_ptr<optim::Optimizer> make_opt(const Config& c, const Tensors& params) {
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
  return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

// Trains `model` kSteps on rows [first, first + rows) of each global batch; with `ddp` the
// gradients are averaged across ranks. Returns the number of skipped steps.
int train(const Config& c, const std::shared_ptr<Mlp>& model, int64_t first, int64_t rows,
          const std::shared_ptr<ProcessGroup>& pg, std::unique_ptr<DistributedDataParallel>* ddp_out = nullptr) {
  model->checkpointed = c.checkpointed;
  model->form.reentrant = c.reentrant;
  std::unique_ptr<optim::Optimizer> opt = make_opt(c, model->parameters());
  if (!c.opt_level.empty()) {
    amp::initialize_models({model}, {opt.get()}, {.opt_level = c.opt_level, .dtype = c.amp_dtype, .verbosity = 0});
  }
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) {
    ddp = std::make_unique<DistributedDataParallel>(
        model, pg, DdpOptions{.bucket_cap_bytes = c.bucket_cap, .reduce_dtype = c.reduce_dtype, .optimizers = {opt.get()}});
  }
  int skipped = 0;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, 2 * kB, c.dtype);
    x = x.narrow(0, first, rows);
    y = y.narrow(0, first, rows);
    opt->zero_grad();
    const Tensor out = c.opt_level.empty() ? (*model)(x) : amp::forward(*model, x);
    const Tensor loss = mse_loss(out.to(c.dtype), y);
    if (c.opt_level.empty()) {
      loss.backward();
    } else {
      amp::scale_loss(loss, *opt).backward();
    }
    opt->step();
    skipped += opt->last_step_skipped() ? 1 : 0;
  }
  if (!c.opt_level.empty()) amp::reset();
  if (ddp_out) *ddp_out = std::move(ddp);
  return skipped;
}

int equivalence(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank(), world = pg->world_size();
  const std::vector<Config> configs = {
      {.name = "f64 sgd", .dtype = DType::F64},
      {.name = "f64 adamw", .dtype = DType::F64, .optimizer = "adamw"},
      {.name = "f64 sgd small buckets", .dtype = DType::F64, .bucket_cap = 512},
      {.name = "f32 sgd", .dtype = DType::F32, .tol = 1e-6},
      {.name = "f32 adamw", .dtype = DType::F32, .optimizer = "adamw", .tol = 1e-6},
      {.name = "f32 adamw small buckets", .dtype = DType::F32, .optimizer = "adamw", .bucket_cap = 1024, .tol = 1e-6},
      {.name = "O1 bf16 sgd", .dtype = DType::F32, .opt_level = "O1", .amp_dtype = "bf16", .tol = 2e-3},
      {.name = "O2 f16 adamw", .dtype = DType::F32, .optimizer = "adamw", .opt_level = "O2", .amp_dtype = "f16", .tol = 2e-3},
      {.name = "O2 bf16 sgd reduce f32", .dtype = DType::F32, .opt_level = "O2", .amp_dtype = "bf16",
       .bucket_cap = 2048, .reduce_dtype = DType::F32, .tol = 1e-2},
      {.name = "f64 sgd small buckets checkpointed reentrant", .dtype = DType::F64, .bucket_cap = 512,
       .checkpointed = true, .reentrant = true},
      {.name = "f64 sgd small buckets checkpointed", .dtype = DType::F64, .bucket_cap = 512, .checkpointed = true},
      {.name = "O1 bf16 sgd checkpointed", .dtype = DType::F32, .opt_level = "O1", .amp_dtype = "bf16", .tol = 2e-3,
       .checkpointed = true},
  };
  std::shared_ptr<Mlp> one_bucket_f64, one_bucket_f32;
  for (const Config& c : configs) {
    auto reference = make_mlp(c.dtype, 7);
    train(c, reference, 0, world * kB, nullptr);
    auto local = make_mlp(c.dtype, 7);
    train(c, local, rank * kB, kB, nullptr);  // this rank's shard alone, no communication
    // Each rank starts from other weights; the broadcast gives every rank rank 0's.
    auto model = make_mlp(c.dtype, rank == 0 ? 7 : 99);
    std::unique_ptr<DistributedDataParallel> ddp;
    train(c, model, rank * kB, kB, pg, &ddp);
    const double d = rel_diff(*model, *reference), d_local = rel_diff(*local, *reference);
    std::printf("rank %d: %s: %zu buckets, max relative difference to 1 x 2B %.3g (tolerance %.1g); without "
                "communication %.3g\n",
                rank, c.name.c_str(), ddp->bucket_names().size(), d, c.tol, d_local);
    check(d <= c.tol, c.name + ": DDP differs from 1 x 2B by " + std::to_string(d));
    check(d_local > 10 * c.tol, c.name + ": the shard alone is as close as DDP; the test cannot tell");
    check(replicas_equal(*pg, *model), c.name + ": the replicas' parameters differ");
    if (c.name == "f64 sgd") one_bucket_f64 = model;
    if (c.name == "f32 adamw") one_bucket_f32 = model;
    if (c.name == "f64 sgd small buckets") {
      check(ddp->bucket_names().size() >= 4, "small buckets: expected several buckets");
      check(bitwise_equal(*model, *one_bucket_f64), "f64: several buckets differ from one bucket");
    }
    if (c.name == "f32 adamw small buckets") {
      check(ddp->bucket_names().size() >= 4, "small buckets: expected several buckets");
      check(bitwise_equal(*model, *one_bucket_f32), "f32: several buckets differ from one bucket");
    }
    ddp.reset();
  }
  pg->shutdown();
  std::printf("rank %d: ddp equivalence %d checks passed\n", rank, g_checks);
  return 0;
}

int overlap(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  manual_seed(3);
  auto fc1 = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 512, .out = 512});
  auto fc2 = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 512, .out = 512});
  auto fc3 = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 512, .out = 64});
  struct Net : nn::Module {
    std::shared_ptr<nn::Linear> a, b, c;
  };
  auto net = std::make_shared<Net>();
  net->a = net->register_module("a", fc1);
  net->b = net->register_module("b", fc2);
  net->c = net->register_module("c", fc3);
  // 64 KiB buckets: c.bias+c.weight (128 KiB) and the 1 MiB layers each get their own.
  DistributedDataParallel ddp(net, pg, {.bucket_cap_bytes = 64 << 10});
  const Tensor x = randn({2048, 512});  // [N, 512]: b's and a's backward take milliseconds after c's buckets left
  int overlapped = 0;
  for (int it = 0; it < 3; ++it) {
    net->zero_grad();
    const Tensor loss = (*net->c)((*net->b)((*net->a)(x).tanh()).tanh()).pow(2.0).mean();
    loss.backward();
    const BackwardTimeline& t = ddp.last_timeline();
    check(t.buckets.size() == ddp.bucket_names().size() && t.buckets.size() >= 4, "expected at least 4 buckets");
    std::printf("rank %d: backward %d: %zu buckets; backward ended at %.2f ms, reduced at %.2f ms; first bucket "
                "ready %.2f started %.2f finished %.2f ms; %.2f of %.2f ms of all-reduce hidden\n",
                pg->rank(), it, t.buckets.size(), 1e3 * t.backward_end_s, 1e3 * t.reduced_s, 1e3 * t.buckets[0].ready_s,
                1e3 * t.buckets[0].started_s, 1e3 * t.buckets[0].finished_s, 1e3 * t.hidden_comm_s(),
                1e3 * t.total_comm_s());
    check(t.buckets[0].launched_in_backward, "the first bucket was not launched from a gradient hook");
    if (t.buckets[0].started_s < t.backward_end_s) ++overlapped;
  }
  check(overlapped > 0, "no bucket's all-reduce started before backward ended in 3 tries");
  pg->shutdown();
  std::printf("rank %d: ddp overlap %d checks passed (overlapped in %d of 3)\n", pg->rank(), g_checks, overlapped);
  return 0;
}

int no_sync(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank(), world = pg->world_size();
  // Reference: one process, one batch of 2 micro-batches x W ranks x B rows.
  auto reference = make_mlp(DType::F64, 5);
  auto model = make_mlp(DType::F64, 5);
  DistributedDataParallel ddp(model, pg);
  optim::SGD opt_ref(reference->parameters(), {.lr = 0.1});
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = batch(s, 2 * world * kB, DType::F64);  // micro-batch m of rank r: rows (m W + r) B
    opt_ref.zero_grad();
    mse_loss((*reference)(x), y).backward();
    opt_ref.step();
    opt.zero_grad();
    const int64_t reduced = ddp.reduced_backwards();
    {
      auto guard = ddp.no_sync();
      const Tensor l = mse_loss((*model)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB)) * 0.5;
      l.backward();
    }
    check(ddp.reduced_backwards() == reduced, "a backward under no_sync reduced the gradients");
    // Local gradients differ across ranks now.
    const Tensor g = model->fc3->weight.grad().contiguous();
    const Tensor all = pg->all_gather(g);
    check((all.select(0, 0) - all.select(0, 1)).abs().max().item<double>() > 0, "no_sync gradients equal across ranks");
    const Tensor l = mse_loss((*model)(x.narrow(0, (world + rank) * kB, kB)), y.narrow(0, (world + rank) * kB, kB)) * 0.5;
    l.backward();
    check(ddp.reduced_backwards() == reduced + 1, "the backward after no_sync did not reduce");
    opt.step();
  }
  const double d = rel_diff(*model, *reference);
  std::printf("rank %d: no_sync: max relative difference to one batch %.3g\n", rank, d);
  check(d <= 1e-12, "no_sync accumulation differs from one large batch by " + std::to_string(d));
  check(replicas_equal(*pg, *model), "replicas differ after no_sync");
  pg->shutdown();
  std::printf("rank %d: ddp no_sync %d checks passed\n", rank, g_checks);
  return 0;
}

int unused(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  {
    // find_unused_parameters: head used on rank 0 only.
    auto model = make_mlp(DType::F64, 5, /*extra=*/true);
    DistributedDataParallel ddp(model, pg, {.bucket_cap_bytes = 1024, .find_unused_parameters = true});
    auto [x, y] = batch(0, 2 * kB, DType::F64);
    const Tensor loss = mse_loss(model->forward(x.narrow(0, rank * kB, kB), rank == 0), y.narrow(0, rank * kB, kB));
    // Rank 0's own gradient of head.weight, without touching .grad.
    Tensor local;
    if (rank == 0) local = autograd::grad({loss}, {model->head->weight}, {}, true)[0];
    loss.backward();
    const Tensor g = model->head->weight.grad();
    check(g.defined(), "head.weight has no gradient on rank " + std::to_string(rank));
    const Tensor all = pg->all_gather(g.contiguous());
    check((all.select(0, 0) - all.select(0, 1)).abs().max().item<double>() == 0, "head.weight gradients differ");
    const bool half = rank != 0 || (g - local * 0.5).abs().max().item<double>() < 1e-15;
    check(gather(*pg, half ? 1.0 : 0.0)[0] == 1.0, "head.weight is not rank 0's gradient / 2 (rank 1 contributed zeros)");
    // Unused everywhere: no gradient anywhere.
    model->zero_grad();
    const Tensor loss2 = mse_loss(model->forward(x.narrow(0, rank * kB, kB), false), y.narrow(0, rank * kB, kB));
    loss2.backward();
    check(!model->head->weight.grad().defined(), "head.weight, unused on every rank, got a gradient");
    check(model->fc1->weight.grad().defined(), "fc1.weight has no gradient");
  }
  {
    auto model = make_mlp(DType::F64, 5, /*extra=*/true);
    DistributedDataParallel ddp(model, pg, {.bucket_cap_bytes = 1024});
    auto [x, y] = batch(0, 2 * kB, DType::F64);
    const Tensor loss = mse_loss(model->forward(x.narrow(0, rank * kB, kB), rank == 0), y.narrow(0, rank * kB, kB));
    std::string what;
    try {
      loss.backward();
    } catch (const DistributedError& e) {
      what = e.what();
    }
    std::printf("rank %d: without find_unused_parameters: %s\n", rank, what.c_str());
    check(what.find("DistributedDataParallel: rank " + std::to_string(rank) + ": 2 parameter(s) received no gradient") !=
              std::string::npos, "expected the unused-parameter error");
    check(what.find("'head.weight' [4, 32] f64 cpu on rank 1") != std::string::npos, "the error does not name head.weight on rank 1");
    check(what.find("find_unused_parameters = true") != std::string::npos, "the error has no hint");
    // The group is still in step: a correct backward works.
    model->zero_grad();
    mse_loss(model->forward(x.narrow(0, rank * kB, kB), true), y.narrow(0, rank * kB, kB)).backward();
    check(model->head->weight.grad().defined(), "the backward after the error did not reduce");
  }
  pg->shutdown();
  std::printf("rank %d: ddp unused %d checks passed\n", rank, g_checks);
  return 0;
}

int mismatch(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  for (int variant = 0; variant < 2; ++variant) {
    manual_seed(1);
    auto model = std::make_shared<Mlp>(rank == 1 && variant == 0 ? 30 : 32, rank == 1 && variant == 1);
    std::string what;
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const DistributedError& e) {
      what = e.what();
    }
    std::printf("rank %d: variant %d: %s\n", rank, variant, what.c_str());
    check(what.find("DistributedDataParallel: rank " + std::to_string(rank) + ": the ranks' models differ") !=
              std::string::npos, "expected the model mismatch error");
    if (variant == 0) {
      check(what.find("rank 0: parameter 'fc1.weight' [32, 8] f32") != std::string::npos &&
                what.find("rank 1: parameter 'fc1.weight' [30, 8] f32") != std::string::npos,
            "the error does not show both shapes");
    } else {
      check(what.find("rank 1: 8 entries (8 trainable parameters)") != std::string::npos &&
                what.find("rank 0: (none)") != std::string::npos, "the error does not show the extra parameter");
    }
  }
  {
    // f16 parameters that differ across ranks, and no optimizer whose masters could follow them.
    auto model = make_mlp(DType::F16, rank + 1);
    std::string what;
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const DistributedError& e) {
      what = e.what();
    }
    std::printf("rank %d: variant 2: %s\n", rank, what.c_str());
    check(what.find("the model has f16/bf16 parameters whose values differ from rank 0's on rank(s) 1") != std::string::npos,
          "expected the low-precision values error");
  }
  {
    // A frozen parameter is broadcast too, as PyTorch's DDP does: the replicas were seeded apart,
    // and rank 1's own frozen weight would make its gradients differ from rank 0's.
    auto model = make_mlp(DType::F32, rank + 7);
    model->fc1->weight.requires_grad_(false);
    DistributedDataParallel ddp(model, pg);
    check(replicas_equal(*pg, *model), "a frozen parameter was not broadcast");
  }
  {
    // f16 gradients are divided by W before the sum, as in PyTorch: 40000 on every rank averages
    // to 40000 (summing first gave 80000 -> inf in f16).
    struct One : nn::Module {
      One() { w = register_parameter("w", full({1}, 1.0, {.dtype = DType::F16})); }
      Tensor w;
    };
    auto one = std::make_shared<One>();
    DistributedDataParallel ddp(one, pg);
    (one->w * full({1}, 40000.0, {.dtype = DType::F16})).sum().backward();
    check(one->w.grad().item_double() == 40000.0, "the f16 average of 40000 on every rank is not 40000");
  }
  // The group still works.
  auto model = make_mlp(DType::F32, rank + 1);
  DistributedDataParallel ddp(model, pg);
  check(replicas_equal(*pg, *model), "the broadcast did not make the replicas equal");
  pg->shutdown();
  std::printf("rank %d: ddp mismatch %d checks passed\n", rank, g_checks);
  return 0;
}

int inf_agreement(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  // GradScaler on an f32 model; after backward rank 1 finds an inf in a gradient (as from a
  // parameter outside DDP or a gradient edited after the reduction).
  for (bool agree : {true, false}) {
    auto model = make_mlp(DType::F32, 5);
    DistributedDataParallel ddp(model, pg, {.agree_found_inf = agree});
    optim::SGD opt(model->parameters(), {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024});
    int steps = 0;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s, 2 * kB, DType::F32);
      opt.zero_grad();
      scaler.scale(mse_loss((*model)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB))).backward();
      if (s == 1 && rank == 1) {
        Tensor g = model->fc2->weight.grad();
        g.data<float>()[3] = INFINITY;
      }
      steps += scaler.step(opt) ? 1 : 0;
      scaler.update();
    }
    const std::vector<double> scales = gather(*pg, scaler.get_scale());
    const std::vector<double> stepped = gather(*pg, double(steps));
    std::printf("rank %d: GradScaler, agree_found_inf %d: steps taken %g and %g, scales %g and %g\n", rank, int(agree),
                stepped[0], stepped[1], scales[0], scales[1]);
    if (agree) {
      check(stepped[0] == 2 && stepped[1] == 2, "with agreement every rank must skip step 1");
      check(scales[0] == 512 && scales[1] == 512, "with agreement the scales must back off together");
      check(replicas_equal(*pg, *model), "replicas differ after an agreed skip");
    } else {
      // Without it the ranks part ways (what the agreement prevents).
      check(stepped[0] == 3 && stepped[1] == 2 && scales[0] != scales[1], "without agreement rank 0 should have stepped");
    }
  }
  {
    // amp::scale_loss at O2 f16: rank 1's batch overflows; the inf reaches every rank.
    auto model = make_mlp(DType::F32, 5);
    optim::SGD opt(model->parameters(), {.lr = 0.1});
    amp::initialize_models({model}, {&opt}, {.opt_level = "O2", .dtype = "f16", .verbosity = 0});
    DistributedDataParallel ddp(model, pg);
    int skipped = 0;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s, 2 * kB, DType::F32);
      x = x.narrow(0, rank * kB, kB);
      if (s == 2 && rank == 1) x = x * 1e6;  // f16 overflow in forward
      opt.zero_grad();
      amp::scale_loss(mse_loss(amp::forward(*model, x), y.narrow(0, rank * kB, kB)), opt).backward();
      opt.step();
      skipped += opt.last_step_skipped() ? 1 : 0;
    }
    const std::vector<double> scales = gather(*pg, amp::loss_scale());
    const std::vector<double> skips = gather(*pg, double(skipped));
    std::printf("rank %d: scale_loss O2 f16: skipped %g and %g, scales %g and %g\n", rank, skips[0], skips[1], scales[0],
                scales[1]);
    check(skips[0] == 1 && skips[1] == 1, "every rank must skip the overflowing step");
    check(scales[0] == scales[1] && scales[0] == 32768, "the scales must back off together");
    check(replicas_equal(*pg, *model), "replicas differ after the skipped step");
    amp::reset();
  }
  pg->shutdown();
  std::printf("rank %d: ddp inf %d checks passed\n", rank, g_checks);
  return 0;
}

const Config kCheckpointConfig{.name = "f64 adamw", .dtype = DType::F64, .optimizer = "adamw"};

int save(std::chrono::milliseconds timeout, const std::string& path) {
  auto pg = init_process_group({.timeout = timeout});
  auto model = make_mlp(DType::F64, pg->rank() == 0 ? 7 : 8);
  std::unique_ptr<DistributedDataParallel> ddp;
  train(kCheckpointConfig, model, pg->rank() * kB, kB, pg, &ddp);
  if (pg->rank() == 0) io::save_checkpoint(path, ddp->module());
  ddp.reset();
  pg->shutdown();
  std::printf("rank %d: ddp save done\n", g_rank);
  return 0;
}

int load(const std::string& path) {
  auto reference = make_mlp(DType::F64, 7);
  train(kCheckpointConfig, reference, 0, 2 * kB, nullptr);
  auto model = make_mlp(DType::F64, 123);
  io::load_checkpoint(path).restore_model(*model);
  const double d = rel_diff(*model, *reference);
  std::printf("rank %d: loaded %zu tensors; max relative difference to 1 x 2B %.3g\n", g_rank,
              model->state_dict().size(), d);
  check(d <= 1e-12, "the checkpoint differs from 1 x 2B by " + std::to_string(d));
  std::printf("rank %d: ddp load %d checks passed\n", g_rank, g_checks);
  return 0;
}

}  // namespace

int ddp_scenario(const std::string& mode, std::chrono::milliseconds timeout, const std::string& arg) {
  if (const char* r = std::getenv("RANK")) g_rank = std::atoi(r);
  if (mode == "ddp-equivalence") return equivalence(timeout);
  if (mode == "ddp-overlap") return overlap(timeout);
  if (mode == "ddp-no-sync") return no_sync(timeout);
  if (mode == "ddp-unused") return unused(timeout);
  if (mode == "ddp-mismatch") return mismatch(timeout);
  if (mode == "ddp-inf") return inf_agreement(timeout);
  if (mode == "ddp-save") return save(timeout, arg);
  if (mode == "ddp-load") return load(arg);
  std::fprintf(stderr, "mg_dist_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
