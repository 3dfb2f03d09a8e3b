// mg_dist_worker's NCCL modes, one process per GPU (device LOCAL_RANK), started by
// tests/distributed/test_nccl_gpu.cpp when 2 or more GPUs are present:
//   nccl <timeout>      every collective for every dtype and op across the ranks, values
//                       computed from all ranks' inputs (exact: small integers and halves, whose
//                       16-bit sums need no rounding), both 16-bit paths; then shutdown. Prints
//                       "rank R: nccl checks passed" or exits 1 at the first miss.
//   nccl_die <timeout>  rank 1 exits (status 9) after a barrier; rank 0's next collectives must
//                       end in a DistributedError within the timeout ("ERROR ...", exit 3).
//   nccl_ddp <timeout>  DistributedDataParallel on the GPUs with the sync-free CUDA GradScaler:
//                       SGD steps equal one process on the whole batch (f32, 1e-5); an inf on
//                       rank 1 makes every rank skip through the device found-inf all-reduce,
//                       with equal scales; a new_group of every rank reduces. Prints
//                       "rank R: nccl ddp checks passed".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/factory.h"
#include "core/generator.h"
#include "cuda/cuda.h"
#include "distributed/ddp.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "nn/linear.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/sgd.h"

namespace mg::test_worker {

using namespace mg::distributed;

namespace {

[[noreturn]] void miss(int rank, const std::string& what) {
  std::printf("rank %d: FAIL nccl: %s\n", rank, what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

double value(int r, int64_t i) { return double((i * 5 + r * 3) % 9 - 4) + (r % 2 ? 0.5 : 0.0); }

Tensor input(DType t, int r, int64_t n, int device) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = is_floating(t) ? value(r, i) : std::floor(value(r, i));
  return from_vector<double>(v, {n}).to(t).to(Device::cuda(device));
}

std::vector<double> host(const Tensor& t) {
  Tensor d = t.to(Device::cpu()).to(DType::F64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

}  // namespace

int nccl(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.backend = "nccl", .timeout = timeout});
  const int W = pg->world_size(), R = pg->rank();
  const int dev = std::atoi(std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "0");
  const int64_t n = 1000;
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Avg && !is_floating(t)) continue;
      for (bool wide : {false, true}) {
        std::vector<double> want(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          double acc = is_floating(t) ? value(0, i) : std::floor(value(0, i));
          for (int r = 1; r < W; ++r) {
            const double x = is_floating(t) ? value(r, i) : std::floor(value(r, i));
            acc = op == ReduceOp::Max ? std::max(acc, x) : op == ReduceOp::Min ? std::min(acc, x) : acc + x;
          }
          want[std::size_t(i)] = acc;
        }
        Tensor expect = from_vector<double>(want, {n});
        if (op == ReduceOp::Avg) {
          expect = expect.to(DType::F32);
          expect.div_(double(W));
        }
        const std::vector<double> e = host(expect.to(t));
        Tensor x = input(t, R, n, dev);
        pg->all_reduce(x, AllReduceOptions{.op = op, .reduce_in_f32 = wide});
        const std::string what = std::string(dtype_name(t)) + " " + reduce_op_name(op) + (wide ? " f32" : "");
        // ncclAvg may scale before summing: allow one rounding of the dtype for avg.
        const std::vector<double> g = host(x);
        for (int64_t i = 0; i < n; ++i) {
          const double a = g[std::size_t(i)], b = e[std::size_t(i)];
          const double tol = op == ReduceOp::Avg ? std::fabs(b) * (t == DType::BF16 ? 1.0 / 128 : t == DType::F16 ? 1.0 / 1024 : 1e-6) : 0;
          if (!(std::fabs(a - b) <= tol)) miss(R, "all_reduce " + what + " element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(b));
        }
        Tensor blocks = input(t, R, W * n, dev);
        Tensor mine = pg->reduce_scatter(blocks, AllReduceOptions{.op = op, .reduce_in_f32 = wide});
        if (mine.numel() != n) miss(R, "reduce_scatter " + what + ": size");
      }
    }
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::U8, DType::Bool}) {
    Tensor x = input(t, R, 77, dev);
    pg->broadcast(x, W - 1);
    if (host(x) != host(input(t, W - 1, 77, dev))) miss(R, std::string("broadcast ") + dtype_name(t));
    Tensor g = pg->all_gather(input(t, R, 77, dev));
    for (int r = 0; r < W; ++r) {
      if (host(g.select(0, r)) != host(input(t, r, 77, dev))) miss(R, std::string("all_gather ") + dtype_name(t));
    }
  }
  pg->barrier();
  pg->shutdown();
  std::printf("rank %d: nccl checks passed\n", R);
  return 0;
}

int nccl_die(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.backend = "nccl", .timeout = timeout});
  const int dev = std::atoi(std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "0");
  pg->barrier();
  if (pg->rank() == 1) {
    std::printf("rank 1 exits\n");
    std::fflush(stdout);
    std::_Exit(9);
  }
  Tensor x = ones({1 << 20}, {.device = Device::cuda(dev)});
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) pg->all_reduce(x);
    pg->barrier();
    std::printf("no error\n");
    return 0;
  } catch (const DistributedError& e) {
    std::printf("ERROR DistributedError after %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), e.what());
  }
  std::fflush(stdout);
  return 3;
}

namespace {

// Linear 8 -> 16, tanh, Linear 16 -> 4 on `device`, seeded.
struct Net : nn::Module {
  Net() {
    a = register_module<nn::Linear>("a", {.in = 8, .out = 16});
    b = register_module<nn::Linear>("b", {.in = 16, .out = 4});
  }
  Tensor operator()(const Tensor& x) { return (*b)((*a)(x).tanh()); }  // x [N, 8] -> [N, 4]
  std::shared_ptr<nn::Linear> a, b;
};

// Trains 3 steps on rows [first, first + rows) of each global batch of 2B; with `pg`, under DDP.
// At step 1 rank `inf_rank` puts an inf into a.weight's gradient after backward (-1: none).
// Returns the scaler's final scale and the parameters (host).
std::pair<double, std::vector<double>> train_on_gpu(int dev, int64_t first, int64_t rows,
                                                    const std::shared_ptr<ProcessGroup>& pg, int inf_rank) {
  manual_seed(3);
  auto net = std::make_shared<Net>();
  net->to(Device::cuda(dev));
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<DistributedDataParallel>(net, pg, DdpOptions{.bucket_cap_bytes = 256});
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024});
  const int rank = pg ? pg->rank() : 0;
  for (int s = 0; s < 3; ++s) {
    manual_seed(100 + uint64_t(s));
    const Tensor x = randn({8, 8}).narrow(0, first, rows).to(Device::cuda(dev));
    const Tensor y = randn({8, 4}).narrow(0, first, rows).to(Device::cuda(dev));
    opt.zero_grad();
    scaler.scale(mse_loss((*net)(x), y)).backward();
    if (s == 1 && rank == inf_rank) net->a->weight.grad().narrow(0, 0, 1).fill_(INFINITY);
    scaler.step(opt);
    scaler.update();
  }
  std::vector<double> params;
  for (const Tensor& p : net->parameters()) {
    const std::vector<double> v = host(p.reshape({p.numel()}));
    params.insert(params.end(), v.begin(), v.end());
  }
  return {scaler.get_scale(), params};
}

}  // namespace

int nccl_ddp(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.backend = "nccl", .timeout = timeout});
  const int R = pg->rank();
  const int dev = std::atoi(std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "0");
  cuda::set_device(dev);
  if (pg->world_size() != 2) miss(R, "nccl_ddp runs on 2 ranks");
  // Clean run: equal to one process on the whole batch.
  const auto reference = train_on_gpu(dev, 0, 8, nullptr, -1);
  const auto got = train_on_gpu(dev, 4 * R, 4, pg, -1);
  double d = 0;
  for (std::size_t i = 0; i < got.second.size(); ++i) d = std::max(d, std::abs(got.second[i] - reference.second[i]));
  std::printf("rank %d: nccl ddp: max difference to 1 x 2B %.3g\n", R, d);
  if (!(d <= 1e-5)) miss(R, "DDP on CUDA differs from 1 x 2B by " + std::to_string(d));
  if (got.first != 1024) miss(R, "the clean run's scale moved");
  // Rank 1 sees an inf: both skip step 1 and halve the scale.
  const auto skipped = train_on_gpu(dev, 4 * R, 4, pg, 1);
  Tensor scales = pg->all_gather(from_vector<double>({skipped.first}, {1}).to(Device::cuda(dev)));  // [2, 1]
  const std::vector<double> s = host(scales);
  if (s[0] != 512 || s[1] != 512) miss(R, "the scales did not back off together");
  // A second group of every rank.
  auto all = pg->new_group();
  Tensor t = from_vector<double>({double(R + 1)}, {1}).to(Device::cuda(dev));
  all->all_reduce(t, ReduceOp::Sum);
  if (host(t)[0] != 3) miss(R, "new_group all_reduce");
  all->shutdown();
  pg->shutdown();
  std::printf("rank %d: nccl ddp checks passed\n", R);
  return 0;
}

}  // namespace mg::test_worker
