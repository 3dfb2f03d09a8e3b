// The program tests/distributed starts, one process per rank (under mixgrad-run or directly with
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set). Modes (timeout in milliseconds):
//   collectives <timeout>  every collective for every dtype and op on sizes 0, 1, 7, 1000 and
//                          300001 (several of Gloo's 1 MiB segments), each result compared
//                          with the value computed from all ranks' inputs; then shutdown.
//                          Prints "rank R: N checks passed" or exits 1 at the first mismatch.
//   join <timeout>         joins the group; prints "joined rank R", or "ERROR <class>: <what>"
//                          and exits 3
//   mismatch <timeout>     rank 0 passes other sizes, dtypes, ops, roots, shapes or another
//                          collective than the others; every rank must refuse each call with
//                          the same error; then the last rank's own checks refuse its input
//                          (integer avg, u8, bad root, reduce_scatter split, undefined) and it
//                          throws its own error, the others one naming it; then the ranks'
//                          averages must still be each step's
//   die <timeout>          rank 1 exits (status 9) in the middle of an all_reduce of 8M floats;
//                          the others report the error ("ERROR ...", exit 3)
//   precision16 <timeout>  f16/bf16 reductions on the native and the reduce_in_f32 path
//                          (precision16.cpp)
//   nccl, nccl_die, nccl_ddp  the NCCL group and DDP on it across GPUs (nccl_worker.cpp)
//   new-group, ddp-syncbn, ddp-buffers  second groups and DDP on them (group_scenarios.cpp)
//   zero-*                 ZeroRedundantOptimizer (zero_scenarios.cpp)
// Decision: each rank computes every rank's inputs (they are functions of rank and index), so it
// can check its own results without a second channel.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "worker_check.h"
#include "core/factory.h"
#include "distributed/error.h"
#include "distributed/init.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::distributed;

namespace mg::test_worker {
int precision16(std::chrono::milliseconds timeout);  // precision16.cpp
int nccl(std::chrono::milliseconds timeout);         // nccl_worker.cpp
int nccl_die(std::chrono::milliseconds timeout);
int nccl_ddp(std::chrono::milliseconds timeout);
}

namespace {

using worker_check::fail;
using worker_check::g_checks;
using worker_check::g_rank;

// Rank r's input element i for dtype t: small integers and halves (exact in every float dtype,
// and their sums exact in f32), with two special columns:
//   i % 17 == 3 (f16, bf16): ranks 0, 1, 2 hold 2048, 2050, 0.5 (f16) / 256, 258, 0.5 (bf16).
//     f16/bf16 travel in their own dtype with one rounding per hop: every order of adding the
//     three gives 4096 (512), while the exact sum 4098.5 (514.5) rounds to 4100 (516);
//   i % 29 == 5 (floats): rank 1 holds NaN, which every op must propagate.
double value(DType t, int r, int64_t i) {
  if (t == DType::I64) {
    const int64_t v = (int64_t(1) << 60) + i * 1000003 + r * 7;
    return double(i % 2 ? -v : v);  // i64 tensors are built from ivalue(), exactly
  }
  if (t == DType::Bool) return double((i + r) % 3 == 0);
  if (t == DType::U8) return double((i * 5 + r * 11) % 256);
  if (t == DType::I32) return double((i * 7 + r * 3) % 1000 - 500);
  if (is_low_precision(t) && i % 17 == 3) {
    const double big = t == DType::F16 ? 2048.0 : 256.0;
    return r == 0 ? big : r == 1 ? big + 2.0 : 0.5;
  }
  if (i % 29 == 5 && r == 1) return std::nan("");
  return double((i * 7 + r * 3) % 11 - 5) + (r % 2 ? 0.5 : 0.0);
}
int64_t ivalue(int r, int64_t i) {
  const int64_t v = (int64_t(1) << 60) + i * 1000003 + r * 7;
  return i % 2 ? -v : v;
}

// Rank r's input [n] of dtype t, offset by `base` elements.
Tensor input(DType t, int r, int64_t n, int64_t base = 0) {
  if (t == DType::I64) {
    std::vector<int64_t> v(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = ivalue(r, base + i);
    return from_vector<int64_t>(v, {n});
  }
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = value(t, r, base + i);
  return from_vector<double>(v, {n}).to(t);
}

// Rounds v to dtype t (f16 and bf16; other dtypes unchanged: our f32/f64 sums are exact).
double round_to(DType t, double v) {
  if (t == DType::F16) return double(float(Half(float(v))));
  if (t == DType::BF16) return double(float(BFloat16(float(v))));
  return v;
}

// The reduction over ranks of input(t, r, n, base), computed here: in f64, rounded to t after
// each rank's term as the native 16-bit path does once per hop (our inputs give the same value
// in every order; f32/f64 sums are exact), then avg divided in the accumulation dtype and
// rounded once, as the group promises.
Tensor expected(DType t, ReduceOp op, int world, int64_t n, int64_t base = 0) {
  if (t == DType::I64) {
    std::vector<int64_t> v(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t acc = ivalue(0, base + i);
      for (int r = 1; r < world; ++r) {
        const int64_t x = ivalue(r, base + i);
        acc = op == ReduceOp::Sum ? acc + x : op == ReduceOp::Max ? std::max(acc, x) : std::min(acc, x);
      }
      v[std::size_t(i)] = acc;
    }
    return from_vector<int64_t>(v, {n});
  }
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = value(t, 0, base + i);
    for (int r = 1; r < world; ++r) {
      const double x = value(t, r, base + i);
      if (std::isnan(acc) || std::isnan(x)) acc = std::nan("");
      else if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc = round_to(t, acc + x);
      else if (op == ReduceOp::Max) acc = std::max(acc, x);
      else acc = std::min(acc, x);
    }
    v[std::size_t(i)] = acc;
  }
  Tensor e = from_vector<double>(v, {n});
  if (op == ReduceOp::Avg) {
    Tensor a = e.to(t == DType::F64 ? DType::F64 : DType::F32);
    a.div_(double(world));
    return a.to(t);
  }
  return e.to(t);
}

// Bitwise equality (NaN matches NaN; f16/bf16/f32 -> f64 is exact).
void check_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ++g_checks;
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    fail(what + ": got " + describe(got) + ", expected " + describe(want));
  }
  const int64_t n = got.numel();
  if (got.dtype() == DType::I64) {
    Tensor a = got.contiguous(), b = want.contiguous();
    for (int64_t i = 0; i < n; ++i) {
      if (a.data<int64_t>()[i] != b.data<int64_t>()[i]) {
        fail(what + ": element " + std::to_string(i) + " is " + std::to_string(a.data<int64_t>()[i]) +
             ", expected " + std::to_string(b.data<int64_t>()[i]));
      }
    }
    return;
  }
  Tensor a = got.to(DType::F64).contiguous(), b = want.to(DType::F64).contiguous();
  for (int64_t i = 0; i < n; ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) {
      fail(what + ": element " + std::to_string(i) + " is " + std::to_string(x) + ", expected " +
           std::to_string(y));
    }
  }
}

std::string name(DType t, ReduceOp op, int64_t n) {
  return std::string(dtype_name(t)) + " " + reduce_op_name(op) + " n=" + std::to_string(n);
}

int collectives(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int W = pg->world_size(), R = pg->rank();
  const DType reducible[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64};
  const DType all[] = {DType::F64, DType::F32, DType::F16, DType::BF16,
                       DType::I64, DType::I32, DType::U8,  DType::Bool};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  const int64_t sizes[] = {0, 1, 7, 1000, 300001};

  for (DType t : reducible) {
    for (ReduceOp op : ops) {
      if (op == ReduceOp::Avg && !is_floating(t)) continue;
      for (int64_t n : sizes) {
        Tensor x = input(t, R, n);
        pg->all_reduce(x, op);
        check_equal(x, expected(t, op, W, n), "all_reduce " + name(t, op, n));
      }
      // reduce_scatter: [W * n] in, rank R keeps the reduction of block R.
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(333)}) {
        Tensor x = input(t, R, W * n);
        Tensor y = pg->reduce_scatter(x, op);
        check_equal(y, expected(t, op, W, n, R * n), "reduce_scatter " + name(t, op, n));
        check_equal(x, input(t, R, W * n), "reduce_scatter leaves its input unchanged");
      }
    }
  }
  // A non-contiguous tensor is reduced in place through its view.
  {
    Tensor base = input(DType::F32, R, 12).view({3, 4});
    Tensor view = base.t();  // [4, 3], strides [1, 4]
    pg->all_reduce(view, ReduceOp::Sum);
    check_equal(base.view({12}), expected(DType::F32, ReduceOp::Sum, W, 12), "all_reduce of a transposed view");
  }
  for (DType t : all) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000)}) {
      for (int root : {0, W - 1}) {
        Tensor x = input(t, R, n);
        pg->broadcast(x, root);
        check_equal(x, input(t, root, n), std::string("broadcast ") + dtype_name(t) + " root " +
                                              std::to_string(root) + " n=" + std::to_string(n));
      }
      Tensor g = pg->all_gather(input(t, R, n));
      if (g.shape() != Shape{W, n}) fail("all_gather: shape " + describe(g));
      for (int r = 0; r < W; ++r) {
        check_equal(g.select(0, r), input(t, r, n), std::string("all_gather ") + dtype_name(t) +
                                                        " row " + std::to_string(r) + " n=" + std::to_string(n));
      }
    }
  }
  {
    Tensor g = pg->all_gather(input(DType::F32, R, 6).view({2, 3}));
    if (g.shape() != Shape{W, 2, 3}) fail("all_gather [2, 3]: shape " + describe(g));
    for (int r = 0; r < W; ++r) check_equal(g.select(0, r), input(DType::F32, r, 6).view({2, 3}), "all_gather [2, 3]");
  }
  pg->barrier();
  ++g_checks;
  pg->shutdown();
  pg->shutdown();  // idempotent
  try {
    Tensor x = input(DType::F32, R, 3);
    pg->all_reduce(x);
    fail("all_reduce after shutdown did not throw");
  } catch (const DistributedError& e) {
    if (std::string(e.what()).find("shut down") == std::string::npos) fail(std::string("after shutdown: ") + e.what());
    ++g_checks;
  }
  std::printf("rank %d: %d checks passed\n", R, g_checks);
  return 0;
}

// Each case passes something different on rank 0 than on the others; every rank must get the
// same DistributedError and the group must stay usable.
int mismatch(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int R = pg->rank();
  const bool zero = R == 0;
  int errors = 0;
  auto expect_error = [&](const std::string& name, auto&& call, const std::string& needle) {
    try {
      call();
      fail(name + ": no error");
    } catch (const DistributedError& e) {
      const std::string msg = e.what();
      if (msg.find("the ranks called different collectives or passed different tensors") == std::string::npos ||
          msg.find(needle) == std::string::npos) {
        fail(name + ": unexpected message: " + msg);
      }
      if (zero && errors == 0) std::printf("%s\n", msg.c_str());
      ++errors;
    }
  };
  expect_error("sizes", [&] { Tensor x = ones({zero ? 1000 : 1200}); pg->all_reduce(x); },
               "rank 0: all_reduce sum of 1000 f32 elements\n  rank 1: all_reduce sum of 1200 f32 elements");
  expect_error("empty", [&] { Tensor x = ones({zero ? 0 : 5}); pg->all_reduce(x); }, "of 0 f32 elements");
  expect_error("dtypes", [&] { Tensor x = ones({8}, {.dtype = zero ? DType::F32 : DType::F64}); pg->all_reduce(x); },
               "rank 1: all_reduce sum of 8 f64 elements");
  expect_error("ops", [&] { Tensor x = ones({8}); pg->all_reduce(x, zero ? ReduceOp::Max : ReduceOp::Sum); },
               "rank 0: all_reduce max of 8");
  expect_error("broadcast sizes", [&] { Tensor x = ones({zero ? 10 : 12}); pg->broadcast(x, 0); },
               "broadcast from root 0 of 12 f32 elements");
  expect_error("broadcast roots", [&] { Tensor x = ones({4}); pg->broadcast(x, zero ? 0 : 1); },
               "rank 1: broadcast from root 1");
  expect_error("all_gather shapes", [&] { pg->all_gather(ones(zero ? Shape{2, 3} : Shape{3, 2})); },
               "(another shape)");
  expect_error("collectives", [&] {
    if (zero) {
      Tensor x = ones({4});
      pg->all_reduce(x);
    } else {
      pg->barrier();
    }
  }, "rank 1: barrier");
  // The last rank's own checks refuse its input: it throws its own error, the others a
  // DistributedError naming it, and the call is abandoned on every rank together (it used to
  // throw before the exchange, so the others' call paired with its next one: every later
  // result was another step's).
  const int last = pg->world_size() - 1;
  int refusals = 0;
  auto expect_refusal = [&](const std::string& name, auto&& call, const std::string& own_message) {
    try {
      call();
      fail(name + ": no error");
    } catch (const DistributedError& e) {
      const std::string msg = e.what();
      if (R == last || msg.find("rank " + std::to_string(last) + " refused its input, so this call was abandoned on "
                                "every rank") == std::string::npos) {
        fail(name + ": unexpected DistributedError: " + msg);
      }
      ++refusals;
    } catch (const Error& e) {
      if (R != last || std::string(e.what()).find(own_message) == std::string::npos) {
        fail(name + ": unexpected error: " + e.what());
      }
      ++refusals;
    }
  };
  const bool refuser = R == last;
  expect_refusal("integer avg", [&] {
    Tensor t = refuser ? ones({8}, {.dtype = DType::I64}) : ones({8});
    pg->all_reduce(t, ReduceOp::Avg);
  }, "avg needs a floating tensor");
  expect_refusal("u8 sum", [&] {
    Tensor t = ones({8}, {.dtype = refuser ? DType::U8 : DType::F32});
    pg->all_reduce(t);
  }, "takes f64, f32, f16, bf16, i64 or i32 tensors");
  expect_refusal("bad root", [&] { Tensor t = ones({4}); pg->broadcast(t, refuser ? 99 : 0); }, "root 99 is not a rank");
  expect_refusal("reduce_scatter split", [&] {
    (void)pg->reduce_scatter(ones({refuser ? pg->world_size() * 2 + 1 : pg->world_size() * 2}));
  }, "must split into");
  expect_refusal("undefined all_gather", [&] { (void)pg->all_gather(refuser ? Tensor() : ones({2})); },
                 "the tensor is undefined");
  // The ranks stay in step: each step's average is that step's.
  for (int step = 0; step < 3; ++step) {
    Tensor y = full({4}, double(10 * step + R));
    pg->all_reduce(y, ReduceOp::Avg);
    check_equal(y, full({4}, 10.0 * step + (pg->world_size() - 1) / 2.0), "avg after the refusals, step " + std::to_string(step));
  }
  Tensor x = ones({16});
  pg->all_reduce(x);  // still usable
  check_equal(x, full({16}, double(pg->world_size())), "all_reduce after the refused calls");
  std::printf("rank %d: %d mismatches refused, %d refusals\n", R, errors, refusals);
  pg->shutdown();
  return 0;
}

int join(std::chrono::milliseconds timeout) {
  try {
    auto pg = init_process_group({.timeout = timeout});
    pg->barrier();
    std::printf("joined rank %d\n", pg->rank());
    pg->shutdown();
    return 0;
  } catch (const DistributedTimeoutError& e) {
    std::printf("ERROR DistributedTimeoutError: %s\n", e.what());
  } catch (const DistributedError& e) {
    std::printf("ERROR DistributedError: %s\n", e.what());
  } catch (const Error& e) {
    std::printf("ERROR Error: %s\n", e.what());
  }
  return 3;
}

int die(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  pg->barrier();
  Tensor x = ones({int64_t(8) << 20});
  if (pg->rank() == 1) {
    std::thread t([&] {
      try {
        pg->all_reduce(x);
      } catch (...) {
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::printf("rank 1 exits\n");
    std::fflush(stdout);
    std::_Exit(9);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 100; ++i) pg->all_reduce(x);  // many, in case the first one completed
    std::printf("no error\n");
    return 0;
  } catch (const DistributedTimeoutError& e) {
    std::printf("ERROR DistributedTimeoutError after %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), e.what());
  } catch (const DistributedError& e) {
    std::printf("ERROR DistributedError after %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), e.what());
  }
  try {
    pg->barrier();
    std::printf("SECOND no error\n");
  } catch (const DistributedError& e) {
    std::printf("SECOND %s\n", e.what());
  }
  std::fflush(stdout);
  return 3;
}

}  // namespace

int dist_data_scenario(const std::string& mode, std::chrono::milliseconds timeout);  // dist_data_scenarios.cpp
// The DistributedDataParallel modes (ddp-*), in ddp_scenarios.cpp.
int ddp_scenario(const std::string& mode, std::chrono::milliseconds timeout, const std::string& arg);
// The ZeroRedundantOptimizer modes (zero-*), in zero_scenarios.cpp.
int zero_scenario(const std::string& mode, std::chrono::milliseconds timeout);
// new_group and the DDP modes built on it (new-group, ddp-syncbn, ddp-buffers), in group_scenarios.cpp.
int group_scenario(const std::string& mode, std::chrono::milliseconds timeout);

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 3 && !(argc == 4 && std::strncmp(argv[1], "ddp-", 4) == 0)) {
    std::fprintf(stderr,
                 "usage: mg_dist_worker collectives|join|die|mismatch|precision16|nccl|nccl_die|nccl_ddp|new-group|ddp-*|zero-* TIMEOUT_MS [ARG]\n");
    return 2;
  }
  if (const char* r = std::getenv("RANK")) g_rank = std::atoi(r);
  const std::string mode = argv[1];
  const std::chrono::milliseconds timeout(std::atoll(argv[2]));
  try {
    if (mode == "collectives") return collectives(timeout);
    if (mode == "join") return join(timeout);
    if (mode == "die") return die(timeout);
    if (mode == "mismatch") return mismatch(timeout);
    if (const int status = dist_data_scenario(mode, timeout); status >= 0) return status;
    if (const int status = group_scenario(mode, timeout); status >= 0) return status;
    if (mode == "precision16") return test_worker::precision16(timeout);
    if (mode == "nccl") return test_worker::nccl(timeout);
    if (mode == "nccl_die") return test_worker::nccl_die(timeout);
    if (mode == "nccl_ddp") return test_worker::nccl_ddp(timeout);
    if (mode.rfind("ddp-", 0) == 0) return ddp_scenario(mode, timeout, argc == 4 ? argv[3] : "");
    if (const int status = zero_scenario(mode, timeout); status >= 0) return status;
  } catch (const std::exception& e) {
    std::printf("rank %d: FAIL exception: %s\n", g_rank, e.what());
    return 1;
  }
  std::fprintf(stderr, "mg_dist_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}
