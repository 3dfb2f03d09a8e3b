// mg_dist_worker's data-parallel scenarios (tests/distributed/test_dist_data.cpp starts them):
//   sync_bn <timeout>  SyncBatchNorm against BatchNorm2d on the concatenated global batch: each
//                      rank builds every rank's input (a function of case, step and rank), runs the
//                      reference on the whole batch itself and compares its own slice: output,
//                      input gradient, the sum over ranks of the weight/bias gradients, running
//                      statistics; f64 (1e-12), f32, f16, bf16; even, uneven and empty batches;
//                      too few values (every rank refuses); eval without communication; a
//                      converted ResNet-20 in f64 against the unconverted one on the global batch.
//   sampler <timeout>  distributed_sampler(pg, ...): the ranks' shards cover the dataset once,
//                      and ranks passing different seeds all get the same error.
// Each prints "rank R: N checks passed" (with the largest errors measured) or exits 1 at the first
// failure. Decision: kept out of mg_dist_worker.cpp (one hook line there) so other branches'
// scenarios merge without conflicts.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker_check.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "distributed/distributed_sampler.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "distributed/sync_batch_norm.h"
#include "nn/models/resnet.h"
#include "nn/normalization.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::distributed;

namespace {

using worker_check::check;
using worker_check::fail;
using worker_check::g_checks;
using worker_check::g_rank;

// max |got - want| / max(max |want|, floor) over all elements (0 for empty tensors), in f64.
double rel_err(const Tensor& got, const Tensor& want, const std::string& what, double floor = 0) {
  if (got.shape() != want.shape()) fail(what + ": shape " + describe(got) + ", expected " + describe(want));
  if (got.numel() == 0) return 0.0;
  NoGradGuard no_grad;
  const Tensor a = got.to(DType::F64), b = want.to(DType::F64);
  const double scale = max(abs(b)).item<double>();
  const double denom = std::max(scale, floor);
  return max(abs(a - b)).item<double>() / (denom > 0 ? denom : 1.0);
}
void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what, double& worst,
                 double floor = 0) {
  const double e = rel_err(got, want, what, floor);
  worst = std::max(worst, e);
  if (!(e <= tol)) fail(what + ": relative error " + str_cat(e) + " > " + str_cat(tol));
  ++g_checks;
}

// Rank r's input of case `k`, step `s`: randn · 1.5 + 3 (a mean far from 0) in f64, then `t`.
Tensor make_input(int k, int s, int r, const Shape& shape, DType t, uint64_t salt = 0) {
  Generator gen(1000003ull * uint64_t(k) + 1009ull * uint64_t(s) + 17ull * uint64_t(r) + salt);
  return (randn(shape, {.dtype = DType::F64}, &gen) * 1.5 + 3.0).to(t);
}

struct BnCase {
  DType dtype;
  std::vector<int64_t> sizes;  // N per rank
  int64_t h, w;
  double tol_y, tol_dx, tol_param, tol_running;
  bool momentum_none = false;
  // dx is compared relative to max(max |dx|, dx_floor): with 2 values per channel y = ±w + b
  // whatever x, so the exact dx is 0 and both sides are rounding noise of size ~1e-16.
  double dx_floor = 0;
};

// Steps of training through SyncBatchNorm on this rank's slice and through BatchNorm2d on the whole
// batch; every result compared.
void sync_bn_case(const std::shared_ptr<ProcessGroup>& pg, int k, const BnCase& c, double worst[4]) {
  const int W = pg->world_size(), R = pg->rank();
  const int64_t C = 3;
  const DType param_dtype = c.dtype == DType::F64 ? DType::F64 : DType::F32;
  nn::BatchNormOptions o{.features = C};
  if (c.momentum_none) o.momentum = std::nullopt;
  auto sync = std::make_shared<SyncBatchNorm>(o, pg);
  auto ref = std::make_shared<nn::BatchNorm2d>(o);
  sync->to(param_dtype);
  ref->to(param_dtype);
  {
    NoGradGuard no_grad;
    const Tensor w = from_vector<double>({1.0, 0.5, -2.0}, {C}).to(param_dtype);
    const Tensor b = from_vector<double>({0.1, -0.3, 0.0}, {C}).to(param_dtype);
    sync->weight.copy_(w);
    ref->weight.copy_(w);
    sync->bias.copy_(b);
    ref->bias.copy_(b);
  }
  int64_t offset = 0;
  for (int r = 0; r < R; ++r) offset += c.sizes[std::size_t(r)];
  const std::string name = "case " + std::to_string(k) + " " + dtype_name(c.dtype);
  for (int s = 0; s < 3; ++s) {
    Tensors xs, gs;
    for (int r = 0; r < W; ++r) {
      xs.push_back(make_input(k, s, r, {c.sizes[std::size_t(r)], C, c.h, c.w}, c.dtype));
      gs.push_back(make_input(k, s, r, {c.sizes[std::size_t(r)], C, c.h, c.w}, c.dtype, 77));
    }
    Tensor xg = cat(xs, 0).requires_grad_();
    Tensor xl = xs[std::size_t(R)].clone().requires_grad_();
    sync->zero_grad();
    ref->zero_grad();
    Tensor yl = (*sync)(xl);
    Tensor yg = (*ref)(xg);
    check(yl.dtype() == c.dtype, name + ": output dtype " + dtype_name(yl.dtype()));
    sum(to(yl, param_dtype) * to(gs[std::size_t(R)], param_dtype)).backward();
    sum(to(yg, param_dtype) * to(cat(gs, 0), param_dtype)).backward();
    const int64_t n = c.sizes[std::size_t(R)];
    const std::string at = name + " step " + std::to_string(s);
    check_close(yl, narrow(yg, 0, offset, n), c.tol_y, at + " y", worst[0]);
    check_close(xl.grad(), narrow(xg.grad(), 0, offset, n), c.tol_dx, at + " dx", worst[1], c.dx_floor);
    Tensor dwb = cat({sync->weight.grad(), sync->bias.grad()});  // this rank's share; summed over ranks
    pg->all_reduce(dwb, ReduceOp::Sum);
    check_close(dwb, cat({ref->weight.grad(), ref->bias.grad()}), c.tol_param, at + " dweight, dbias", worst[2]);
    check_close(sync->running_mean, ref->running_mean, c.tol_running, at + " running_mean", worst[3]);
    check_close(sync->running_var, ref->running_var, c.tol_running, at + " running_var", worst[3]);
    check(sync->num_batches_tracked.item<int64_t>() == s + 1, at + " num_batches_tracked");
  }
  // Eval: the running statistics, no communication — only rank 0 calls the layer (another shape),
  // so a collective inside would meet the others' barrier below and fail the consistency check.
  if (R == 0) {
    sync->eval();
    auto copy = std::make_shared<nn::BatchNorm2d>(o);
    copy->to(param_dtype);
    copy->load_state_dict(sync->state_dict());
    copy->eval();
    const Tensor x = make_input(k, 9, 0, {2, C, c.h + 1, c.w}, c.dtype);
    NoGradGuard no_grad;
    // Not counted in g_checks (only rank 0 runs it; the counts must match across ranks).
    if (rel_err((*sync)(x), (*copy)(x), name + " eval") != 0.0) fail(name + ": eval output differs from BatchNorm2d's");
    std::printf("rank 0: %s eval equal to BatchNorm2d's without communication\n", name.c_str());
    sync->train();
  }
  pg->barrier();
}

int sync_bn(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int W = pg->world_size(), R = pg->rank();
  g_rank = R;
  std::vector<BnCase> cases;
  const std::vector<std::vector<int64_t>> sizes =
      W == 2 ? std::vector<std::vector<int64_t>>{{4, 4}, {3, 5}, {6, 0}}
             : std::vector<std::vector<int64_t>>{{3, 3, 3}, {2, 0, 5}, {0, 4, 1}};
  for (const auto& sz : sizes) {
    cases.push_back({DType::F64, sz, 3, 4, 1e-12, 1e-12, 1e-12, 1e-12});
    cases.push_back({DType::F32, sz, 3, 4, 1e-5, 1e-4, 1e-5, 1e-6});
  }
  cases.push_back({DType::F64, sizes[1], 2, 3, 1e-12, 1e-12, 1e-12, 1e-12, /*momentum_none=*/true});
  // One value per rank and channel (1x1 images): 2 or 3 values over all ranks suffice.
  cases.push_back({DType::F64, W == 2 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1, 0, 1}, 1, 1, 1e-12,
                   1e-12, 1e-12, 1e-12, false, /*dx_floor=*/1.0});
  // f16/bf16 inputs, f32 statistics and parameters, output in the input dtype: the same kernel math
  // as BatchNorm's up to summation order, so the outputs agree to a rounding or two.
  cases.push_back({DType::F16, sizes[1], 3, 4, 2e-3, 2e-3, 1e-4, 1e-5});
  cases.push_back({DType::BF16, sizes[2], 3, 4, 1.6e-2, 1.6e-2, 1e-3, 1e-5});
  double worst[4] = {0, 0, 0, 0};
  double worst_f64[4] = {0, 0, 0, 0};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    double w[4] = {0, 0, 0, 0};
    sync_bn_case(pg, int(k), cases[k], w);
    double* into = cases[k].dtype == DType::F64 ? worst_f64 : cases[k].dtype == DType::F32 ? worst : nullptr;
    if (into) for (int i = 0; i < 4; ++i) into[i] = std::max(into[i], w[i]);
  }

  // Too few values over all ranks: every rank refuses the same way, and the group stays usable.
  {
    auto bn = std::make_shared<SyncBatchNorm>(nn::BatchNormOptions{.features = 2}, pg);
    const Tensor x = zeros({R == 0 ? 1 : 0, 2, 1, 1});
    std::string what;
    try {
      (*bn)(x);
    } catch (const ShapeError& e) {
      what = e.what();
    }
    check(what.find("SyncBatchNorm: expected more than 1 value per channel over all " + std::to_string(W) +
                    " ranks' batches, got 1") != std::string::npos,
          "refusal of a 1-value batch: '" + what + "'");
    check(bn->num_batches_tracked.item<int64_t>() == 0, "a refused batch is not counted");
    pg->barrier();
  }

  // ResNet-20 (f64, 8x8 images): converted on this rank's slice against the unconverted model on
  // the global batch; logits, every parameter gradient (summed over ranks) and every buffer.
  {
    const std::vector<int64_t> n = W == 2 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{2, 0, 3};
    manual_seed(5);
    auto local = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20));
    manual_seed(5);
    auto global = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20));
    local->to(DType::F64);
    global->to(DType::F64);
    const auto keys_before = local->state_dict();
    check(convert_sync_batchnorm(*local, pg) == 19, "ResNet-20 has 19 batch norms");
    const auto keys_after = local->state_dict();
    check(keys_before.size() == keys_after.size(), "state dict size after conversion");
    for (std::size_t i = 0; i < keys_before.size(); ++i) {
      check(keys_before[i].first == keys_after[i].first && keys_before[i].second.data_ptr() == keys_after[i].second.data_ptr(),
            "state dict entry " + keys_before[i].first + " after conversion");
    }
    Tensors xs, gs;
    for (int r = 0; r < W; ++r) {
      xs.push_back(make_input(500, 0, r, {n[std::size_t(r)], 3, 8, 8}, DType::F64));
      gs.push_back(make_input(500, 0, r, {n[std::size_t(r)], 10}, DType::F64, 5));
    }
    int64_t offset = 0;
    for (int r = 0; r < R; ++r) offset += n[std::size_t(r)];
    for (int s = 0; s < 2; ++s) {
      local->zero_grad();
      global->zero_grad();
      const Tensor yl = (*local)(xs[std::size_t(R)]);
      const Tensor yg = (*global)(cat(xs, 0));
      sum(yl * gs[std::size_t(R)]).backward();
      sum(yg * cat(gs, 0)).backward();
      double e = 0;
      check_close(yl, narrow(yg, 0, offset, n[std::size_t(R)]), 1e-12, "ResNet-20 logits", e);
      const auto pl = local->named_parameters(), pgl = global->named_parameters();
      Tensors grads;
      for (const auto& entry : pl) grads.push_back(reshape(entry.second.grad(), {-1}));
      Tensor flat = cat(grads);
      pg->all_reduce(flat, ReduceOp::Sum);  // every rank's share of every parameter gradient
      int64_t at = 0;
      for (std::size_t i = 0; i < pgl.size(); ++i) {
        const Tensor& want = pgl[i].second.grad();
        check_close(reshape(narrow(flat, 0, at, want.numel()), want.shape()), want, 1e-10,
                    "ResNet-20 gradient of " + pgl[i].first, e);
        at += want.numel();
      }
      const auto bl = local->named_buffers(), bg = global->named_buffers();
      for (std::size_t i = 0; i < bl.size(); ++i) check_close(bl[i].second, bg[i].second, 1e-12, "ResNet-20 " + bl[i].first, e);
      worst_f64[0] = std::max(worst_f64[0], e);
    }
  }
  std::printf("rank %d: worst relative errors f64: y %.1e dx %.1e dweight/dbias %.1e running %.1e; "
              "f32: y %.1e dx %.1e dweight/dbias %.1e running %.1e\n",
              R, worst_f64[0], worst_f64[1], worst_f64[2], worst_f64[3], worst[0], worst[1], worst[2], worst[3]);
  pg->shutdown();
  std::printf("rank %d: %d checks passed\n", R, g_checks);
  return 0;
}

int sampler(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int W = pg->world_size(), R = pg->rank();
  g_rank = R;
  for (int64_t n : {0, 7, 100}) {
    for (bool drop_last : {false, true}) {
      auto s = distributed_sampler(*pg, n, {.seed = 31, .drop_last = drop_last});
      check(s->options().rank == R && s->options().world_size == W, "rank and world size from the group");
      for (int64_t epoch : {0, 1}) {
        const std::vector<int64_t> mine = s->indices(epoch);
        // Gather every rank's shard (equal lengths) and count each example.
        const Tensor all = pg->all_gather(from_vector<int64_t>(mine, {int64_t(mine.size())}));
        std::vector<int> count(std::size_t(n), 0);
        const int64_t* p = all.data<int64_t>();
        for (int64_t i = 0; i < all.numel(); ++i) ++count[std::size_t(p[i])];
        const int64_t total = s->total_size();
        int64_t once = 0, twice = 0;
        for (int c : count) once += c == 1, twice += c == 2;
        const std::string what = "N " + std::to_string(n) + " epoch " + std::to_string(epoch);
        if (drop_last) check(once == total && twice == 0, what + ": drop_last shards are disjoint");
        else check(once + twice == n && twice == total - n, what + ": padded shards cover every example");
      }
    }
  }
  // Different seeds: every rank refuses with the same listing, then the group still works.
  std::string what;
  try {
    distributed_sampler(*pg, 10, {.seed = uint64_t(R == W - 1 ? 2 : 1)});
  } catch (const DistributedError& e) {
    what = e.what();
  }
  check(what.find("distributed_sampler: rank " + std::to_string(R) + ": the ranks passed different settings") !=
                std::string::npos &&
            what.find("rank " + std::to_string(W - 1) + ": dataset_size 10, shuffle true, seed 2, drop_last false") !=
                std::string::npos,
        "refusal of different seeds: '" + what + "'");
  // The last rank passes a rank that is not its own: it throws its own error after the exchange,
  // the others one naming it, and all leave the call together (the barrier below then pairs).
  what.clear();
  try {
    distributed_sampler(*pg, 10, {.rank = R == W - 1 ? 0 : R, .world_size = W});
  } catch (const Error& e) {
    what = e.what();
  }
  check(R == W - 1 ? what.find("distributed_sampler: options give rank 0 of " + std::to_string(W)) == 0
                   : what.find("rank " + std::to_string(W - 1) + " passed .rank and .world_size that are not its "
                               "group's") != std::string::npos,
        "refusal of one rank's options: '" + what + "'");
  pg->barrier();
  pg->shutdown();
  std::printf("rank %d: %d checks passed\n", R, g_checks);
  return 0;
}

}  // namespace

// The hook mg_dist_worker.cpp calls: the exit status, or -1 when `mode` is not one of these.
int dist_data_scenario(const std::string& mode, std::chrono::milliseconds timeout) {
  if (const char* r = std::getenv("RANK")) g_rank = std::atoi(r);
  // One thread per rank: 2 or 3 ranks already fill the 2-core CI machine, and OpenMP teams that
  // spin-wait (OMP_WAIT_POLICY unset) would oversubscribe it many times over (measured: 56 s
  // instead of 3-7 s for sync_bn).
  set_num_threads(1);
  if (mode == "sync_bn") return sync_bn(timeout);
  if (mode == "sampler") return sampler(timeout);
  return -1;
}
