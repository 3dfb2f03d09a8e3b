// mg_dist_worker's modes for second groups and what DistributedDataParallel builds on them
// (tests/distributed/test_groups.cpp starts them; each prints "rank R: <mode> N checks passed" or
// "rank R: FAIL ..." and exits 1 at the first failed check):
//   new-group       (3 ranks) new_group of a subset ({0, 2}: rank 1 gets none), of another subset
//                   and of every rank; collectives on each with results computed here; the parent
//                   and a full subgroup used at once from two threads; bad rank lists refused
//   ddp-syncbn      (2 ranks) a Linear -> SyncBatchNorm -> tanh -> Linear model on the user's
//                   group under DDP (which communicates on its own group): 2 ranks x B equal
//                   1 process x 2B with plain BatchNorm after SGD steps (f64, 1e-10), parameters
//                   and running statistics
//   ddp-buffers     (2 ranks) plain BatchNorm, each rank its own data: with broadcast_buffers the
//                   ranks' running statistics are equal after every step (rank 0's), without it
//                   they differ; backward with create_graph is refused on every rank and the
//                   group stays in step; a gradient penalty through autograd::grad still works
//   ddp-rebuild     (2 ranks) a model that registers its layers in the reverse of the order it
//                   uses them: the first plan puts the last-arriving gradients first, the plan
//                   after the first backward follows their arrival; 4 SGD steps bitwise equal
//                   to the same run without the rebuild, and equal to 1 x 2B (f64, 1e-12)
// Decision: the single-process reference runs inside each rank (the data are functions of a
// seed), so a rank checks its own result without a second channel.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "worker_check.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "distributed/ddp.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "distributed/sync_batch_norm.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace mg;
using namespace mg::distributed;

namespace {

using worker_check::check;
using worker_check::g_checks;
using worker_check::g_rank;

// Sum over the group of `v` (a [1] f64 all-reduce).
double group_sum(ProcessGroup& pg, double v) {
  Tensor t = from_vector<double>({v}, {1});
  pg.all_reduce(t, ReduceOp::Sum);
  return t.data<double>()[0];
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int new_group(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  check(pg->world_size() == 3, "new-group runs on 3 ranks");
  // Subset {0, 2}: ranks 0 and 1 of the new group; rank 1 of pg is not a member.
  auto a = pg->new_group({2, 0});
  check((a != nullptr) == (rank != 1), "new_group({0, 2}): membership");
  if (a) {
    check(a->world_size() == 2 && a->rank() == (rank == 0 ? 0 : 1), "new_group({0, 2}): rank and size");
    check(group_sum(*a, rank + 1) == 1 + 3, "new_group({0, 2}): all_reduce sum");
    Tensor g = a->all_gather(from_vector<double>({double(rank)}, {1}));  // [2, 1]
    check(g.data<double>()[0] == 0 && g.data<double>()[1] == 2, "new_group({0, 2}): all_gather in member order");
  }
  // Subset {1, 2}, made after it: rank 0 is not a member.
  auto b = pg->new_group({1, 2});
  check((b != nullptr) == (rank != 0), "new_group({1, 2}): membership");
  if (b) {
    check(group_sum(*b, rank + 1) == 2 + 3, "new_group({1, 2}): all_reduce sum");
    Tensor t = from_vector<double>({double(10 * rank)}, {1});
    b->broadcast(t, 1);  // root: rank 1 of b = rank 2 of pg
    check(t.data<double>()[0] == 20, "new_group({1, 2}): broadcast from its rank 1");
  }
  // Every rank, used at the same time as the parent from another thread.
  auto all = pg->new_group();
  check(all != nullptr && all->rank() == rank && all->world_size() == 3, "new_group(): every rank");
  double sub_total = 0;
  std::thread other([&] {
    for (int i = 0; i < 50; ++i) sub_total += group_sum(*all, i * (rank + 1));
  });
  double total = 0;
  for (int i = 0; i < 50; ++i) total += group_sum(*pg, i);
  other.join();
  const double s = 49.0 * 50.0 / 2.0;
  check(total == 3 * s, "the parent's all_reduce while the subgroup runs");
  check(sub_total == 6 * s, "the subgroup's all_reduce while the parent runs");
  // Bad rank lists: the same error on every rank, nothing started.
  const std::string out_of_range = error_of([&] { pg->new_group({0, 3}); });
  check(out_of_range.find("ProcessGroupGloo::new_group: rank 3 is not a rank of this group, [0, 3)") == 0,
        "new_group({0, 3}): " + out_of_range);
  const std::string twice = error_of([&] { pg->new_group({1, 1}); });
  check(twice.find("ProcessGroupGloo::new_group: rank 1 is listed twice") == 0, "new_group({1, 1}): " + twice);
  // A subgroup of a subgroup.
  if (a) {
    auto aa = a->new_group({1});
    check((aa != nullptr) == (rank == 2), "a subgroup's new_group({1}): membership");
    if (aa) check(aa->world_size() == 1 && group_sum(*aa, 7) == 7, "a one-rank subgroup");
  }
  if (a) a->shutdown();
  if (b) b->shutdown();
  all->shutdown();
  pg->shutdown();
  std::printf("rank %d: new-group %d checks passed\n", rank, g_checks);
  return 0;
}

// Linear 6 -> 16, BatchNorm over the 16 features, tanh, Linear 16 -> 3.
struct BnNet : nn::Module {
  BnNet() {
    fc1 = register_module<nn::Linear>("fc1", {.in = 6, .out = 16});
    bn = register_module<nn::BatchNorm1d>("bn", {.features = 16});
    fc2 = register_module<nn::Linear>("fc2", {.in = 16, .out = 3});
  }
  Tensor operator()(const Tensor& x) { return (*fc2)((*bn)((*fc1)(x)).tanh()); }  // x [N, 6] -> [N, 3]
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm1d> bn;
};

std::shared_ptr<BnNet> make_net(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<BnNet>();
  m->to(DType::F64);
  return m;
}

constexpr int64_t kB = 5;  // rows per rank

// Step s's global batch of `rows` rows (x [rows, 6], y [rows, 3]), f64; shifted per step so the
// batch statistics move.
std::pair<Tensor, Tensor> batch(int step, int64_t rows) {
  manual_seed(500 + uint64_t(step));
  Tensor x = randn({rows, 6}, {.dtype = DType::F64}) * (1.0 + 0.3 * step) + 0.5 * step;
  Tensor y = randn({rows, 3}, {.dtype = DType::F64});
  return {x, y};
}

// max |a - b| over every parameter and buffer (f64 models of the same structure).
double max_diff(const nn::Module& a, const nn::Module& b) {
  const nn::NamedTensors sa = a.state_dict(), sb = b.state_dict();  // the same names, in the same order
  double d = 0;
  for (std::size_t i = 0; i < sa.size(); ++i) {
    d = std::max(d, (sa[i].second.to(DType::F64) - sb[i].second.to(DType::F64)).abs().max().item<double>());
  }
  return d;
}

// Every rank's buffers bitwise equal.
bool buffers_equal(ProcessGroup& pg, const nn::Module& m) {
  for (const auto& [name, b] : m.named_buffers()) {
    const Tensor all = pg.all_gather(b.contiguous());  // [W, *b.shape]
    const std::size_t bytes = std::size_t(b.numel()) * b.element_size();
    const char* d = static_cast<const char*>(all.data_ptr());
    for (int r = 1; r < pg.world_size(); ++r) {
      if (std::memcmp(d, d + std::size_t(r) * bytes, bytes)) return false;
    }
  }
  return true;
}

int ddp_syncbn(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank(), world = pg->world_size();
  constexpr int kSteps = 4;
  // Reference: one process, plain BatchNorm on the global batch.
  auto reference = make_net(11);
  optim::SGD opt_ref(reference->parameters(), {.lr = 0.2, .momentum = 0.5});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, world * kB);
    opt_ref.zero_grad();
    mse_loss((*reference)(x), y).backward();
    opt_ref.step();
  }
  // DDP with SyncBatchNorm on the user's group; rank 1 starts from other weights.
  auto model = make_net(rank == 0 ? 11 : 12);
  check(convert_sync_batchnorm(*model, pg) == 1, "convert_sync_batchnorm converted one layer");
  DistributedDataParallel ddp(model, pg, {.bucket_cap_bytes = 256});  // several buckets
  check(&ddp.comm_group() != pg.get(), "DDP communicates on a group of its own");
  check(ddp.bucket_names().size() >= 3, "expected several buckets");
  optim::SGD opt(model->parameters(), {.lr = 0.2, .momentum = 0.5});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, world * kB);
    opt.zero_grad();
    mse_loss((*model)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB)).backward();
    opt.step();
  }
  const double d = max_diff(*model, *reference);
  // Without the synchronisation the statistics are the shard's: far from the reference.
  auto local = make_net(11);
  optim::SGD opt_local(local->parameters(), {.lr = 0.2, .momentum = 0.5});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, world * kB);
    opt_local.zero_grad();
    mse_loss((*local)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB)).backward();
    opt_local.step();
  }
  const double d_local = max_diff(*local, *reference);
  std::printf("rank %d: SyncBatchNorm under DDP, %zu buckets: max difference to 1 x 2B BatchNorm %.3g (parameters and "
              "running statistics); one shard alone %.3g\n",
              rank, ddp.bucket_names().size(), d, d_local);
  check(d <= 1e-10, "SyncBatchNorm under DDP differs from 1 x 2B by " + std::to_string(d));
  check(d_local > 1e-4, "the shard alone is as close as DDP; the test cannot tell");
  const double dv = (model->bn->running_var - reference->bn->running_var).abs().max().item<double>();
  const double dm = (model->bn->running_mean - reference->bn->running_mean).abs().max().item<double>();
  check(dv <= 1e-10 && dm <= 1e-10, "running statistics differ from 1 x 2B BatchNorm's");
  pg->shutdown();
  std::printf("rank %d: ddp syncbn %d checks passed\n", rank, g_checks);
  return 0;
}

int ddp_buffers(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  for (bool broadcast : {true, false}) {
    auto model = make_net(21);
    DistributedDataParallel ddp(model, pg, {.broadcast_buffers = broadcast});
    optim::SGD opt(model->parameters(), {.lr = 0.1});
    bool equal_every_step = true;
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch(s, 2 * kB);
      opt.zero_grad();
      mse_loss((*model)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB)).backward();
      opt.step();
      equal_every_step = equal_every_step && buffers_equal(*pg, *model);
    }
    std::printf("rank %d: broadcast_buffers %d: buffers equal on every rank after every step: %d\n", rank,
                int(broadcast), int(equal_every_step));
    if (broadcast) {
      check(equal_every_step, "broadcast_buffers: the ranks' running statistics differ");
      // They are rank 0's: its running mean moved by its own batches only.
      const double m = model->bn->running_mean.abs().sum().item<double>();
      check(group_sum(*pg, m) == 2 * m && m > 0, "broadcast_buffers: not rank 0's statistics");
    } else {
      check(!equal_every_step, "without broadcast_buffers the ranks' statistics should differ");
    }
  }
  {
    // Double backward through DDP: refused on every rank before anything is communicated.
    auto model = make_net(31);
    DistributedDataParallel ddp(model, pg);
    auto [x, y] = batch(0, 2 * kB);
    const Tensor loss = mse_loss((*model)(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB));
    std::string what;
    try {
      autograd::backward({loss}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    } catch (const NotImplementedError& e) {
      what = e.what();
    }
    std::printf("rank %d: create_graph: %s\n", rank, what.c_str());
    check(what.find("DistributedDataParallel: backward with create_graph = true (double backward) is not supported") == 0,
          "expected the create_graph error, got: " + what);
    // A gradient penalty taken with autograd::grad, then a plain backward: reduced as usual.
    model->zero_grad();
    auto [x2, y2] = batch(1, 2 * kB);
    const Tensor xr = x2.narrow(0, rank * kB, kB);
    const Tensor l = mse_loss((*model)(xr), y2.narrow(0, rank * kB, kB));
    const Tensor g = autograd::grad({l}, {model->fc2->weight}, {}, true, true)[0];  // [3, 16]
    (l + g.pow(2.0).sum()).backward();
    check(ddp.reduced_backwards() == 1, "the backward after the refused one did not reduce");
    const Tensor all = pg->all_gather(model->fc1->weight.grad().contiguous());  // [2, 16, 6]
    check((all.select(0, 0) - all.select(0, 1)).abs().max().item<double>() == 0,
          "the gradient-penalty gradients differ across ranks");
  }
  pg->shutdown();
  std::printf("rank %d: ddp buffers %d checks passed\n", rank, g_checks);
  return 0;
}

// Layers registered c, b, a but applied a -> b -> c: reverse registration order is the reverse
// of the order their gradients arrive in.
struct Reversed : nn::Module {
  Reversed() {
    c = register_module<nn::Linear>("c", {.in = 16, .out = 3});
    b = register_module<nn::Linear>("b", {.in = 16, .out = 16});
    a = register_module<nn::Linear>("a", {.in = 6, .out = 16});
  }
  Tensor operator()(const Tensor& x) { return (*c)((*b)((*a)(x).tanh()).tanh()); }  // x [N, 6] -> [N, 3]
  std::shared_ptr<nn::Linear> a, b, c;
};

bool starts_with(const std::vector<std::string>& names, const std::string& prefix) {
  return !names.empty() && names.front().rfind(prefix, 0) == 0;
}

// 4 SGD steps of `model` on rows [first, first + rows); with `pg` under DDP (rebuild or not).
// `before`/`after`: the bucket names before the first backward and after it.
void train_reversed(const std::shared_ptr<Reversed>& model, int64_t first, int64_t rows,
                    const std::shared_ptr<ProcessGroup>& pg, bool rebuild,
                    std::vector<std::vector<std::string>>* before = nullptr,
                    std::vector<std::vector<std::string>>* after = nullptr) {
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<DistributedDataParallel>(model, pg, DdpOptions{.bucket_cap_bytes = 256, .rebuild_buckets = rebuild});
  if (ddp && before) *before = ddp->bucket_names();
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = batch(s, 2 * kB);
    opt.zero_grad();
    mse_loss((*model)(x.narrow(0, first, rows)), y.narrow(0, first, rows)).backward();
    opt.step();
    if (ddp && after && s == 0) *after = ddp->bucket_names();
  }
}

bool params_bitwise_equal(const nn::Module& a, const nn::Module& b) {
  const nn::NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const Tensor x = pa[i].second.contiguous(), y = pb[i].second.contiguous();
    if (std::memcmp(x.data_ptr(), y.data_ptr(), std::size_t(x.numel()) * x.element_size())) return false;
  }
  return true;
}

int ddp_rebuild(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int rank = pg->rank();
  auto make = [] {
    manual_seed(41);
    auto m = std::make_shared<Reversed>();
    m->to(DType::F64);
    return m;
  };
  auto reference = make();
  train_reversed(reference, 0, 2 * kB, nullptr, false);
  std::vector<std::vector<std::string>> before, after;
  auto rebuilt = make();
  train_reversed(rebuilt, rank * kB, kB, pg, true, &before, &after);
  auto fixed = make();
  train_reversed(fixed, rank * kB, kB, pg, false);
  auto join = [](const std::vector<std::vector<std::string>>& buckets) {
    std::string s;
    for (const auto& b : buckets) {
      s += " [";
      for (const auto& n : b) s += " " + n;
      s += " ]";
    }
    return s;
  };
  std::printf("rank %d: buckets before the first backward:%s\nrank %d: after it:%s\n", rank, join(before).c_str(), rank,
              join(after).c_str());
  check(before.size() >= 3 && starts_with(before.front(), "a."), "the first plan should start with a's parameters");
  check(after.size() == before.size() && (starts_with(after.front(), "c.")), "the rebuilt plan should start with c's parameters");
  check(starts_with(after.back(), "a."), "the rebuilt plan should end with a's parameters");
  check(params_bitwise_equal(*rebuilt, *fixed), "rebuilt buckets changed the result");
  double d = 0;
  const nn::NamedTensors pr = rebuilt->named_parameters(), pf = reference->named_parameters();
  for (std::size_t i = 0; i < pr.size(); ++i) d = std::max(d, (pr[i].second - pf[i].second).abs().max().item<double>());
  std::printf("rank %d: rebuilt buckets: max difference to 1 x 2B %.3g\n", rank, d);
  check(d <= 1e-12, "rebuilt buckets differ from 1 x 2B by " + std::to_string(d));
  const Tensor all = pg->all_gather(rebuilt->a->weight.contiguous());  // [2, 16, 6]
  check((all.select(0, 0) - all.select(0, 1)).abs().max().item<double>() == 0, "the replicas differ");
  pg->shutdown();
  std::printf("rank %d: ddp rebuild %d checks passed\n", rank, g_checks);
  return 0;
}

}  // namespace

// -1: not one of this file's modes.
int group_scenario(const std::string& mode, std::chrono::milliseconds timeout) {
  if (const char* r = std::getenv("RANK")) g_rank = std::atoi(r);
  if (mode == "new-group") return new_group(timeout);
  if (mode == "ddp-syncbn") return ddp_syncbn(timeout);
  if (mode == "ddp-buffers") return ddp_buffers(timeout);
  if (mode == "ddp-rebuild") return ddp_rebuild(timeout);
  return -1;
}
