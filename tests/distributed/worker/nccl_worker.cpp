// mg_dist_worker's NCCL modes, one process per GPU (device LOCAL_RANK), started by
// tests/distributed/test_nccl_gpu.cpp when 2 or more GPUs are present:
//   nccl <timeout>      every collective for every dtype and op across the ranks, values
//                       computed from all ranks' inputs (exact: small integers and halves, whose
//                       16-bit sums need no rounding), both 16-bit paths; then shutdown. Prints
//                       "rank R: nccl checks passed" or exits 1 at the first miss.
//   nccl_die <timeout>  rank 1 exits (status 9) after a barrier; rank 0's next collectives must
//                       end in a DistributedError within the timeout ("ERROR ...", exit 3).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "ops/ops.h"

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

}  // namespace mg::test_worker
