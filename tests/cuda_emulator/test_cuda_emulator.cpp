// The CUDA emulator itself (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md; built only there): the
// launch rewrite, barriers and shared memory, the shuffles' lane rules, the failures a GPU would
// hang or compute garbage on, launch-configuration checks, fresh memory, and stream capture with
// the runtime's rules. The backend's own kernels are tested by every [gpu] case of the other folders.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/emulator/emulator.h"
#include "cuda/emulator/grid_runner.h"
#include "cuda/emulator/launch_rewrite.h"
// Last: it turns the CUDA keywords and threadIdx & co. into the emulator's.
#include "cuda/emulator/device_side.h"

namespace {

// Sets the emulator's schedule for one test and puts the previous one back.
struct ScheduleGuard {
  mg_emu::Schedule saved = mg_emu::schedule();
  explicit ScheduleGuard(mg_emu::Schedule s) { mg_emu::set_schedule(s); }
  ~ScheduleGuard() { mg_emu::set_schedule(saved); }
};

float* device_floats(std::size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess);
  return static_cast<float*>(p);
}

// A sum per block through shared memory: the tree needs every __syncthreads to be a real barrier.
__global__ void block_sums(const float* in, float* out) {
  __shared__ float sh[64];
  const unsigned t = threadIdx.x;
  sh[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

// A race: thread t reads the slot thread t - 1 wrote, with no barrier between the write and the
// read. Thread 0 reads the last slot. On a GPU the result depends on the order threads run in.
__global__ void neighbour_without_barrier(float* out) {
  __shared__ float sh[32];
  ::mg_emu::poison_shared(&sh, sizeof(sh));  // what rewrite_launches adds in the backend's kernels
  const unsigned t = threadIdx.x;
  sh[t] = float(t);
  out[t] = sh[(t + 31) % 32];
}

// 16 bytes read as one vector from p + offset (a GPU needs offset % 16 == 0), by thread 0.
struct alignas(16) Vec16 {
  float v[4];
};
__global__ void read_vector(const char* p, long long offset, float* out) {
  if (threadIdx.x == 0) *out = reinterpret_cast<const Vec16*>(p + offset)->v[0];
}

// out[i] = in[i] + 1 for i < n (one block of 64 threads).
__global__ void add_one(const float* in, float* out, int n) {
  const int i = int(threadIdx.x);
  if (i < n) out[i] = in[i] + 1.0f;
}

// One byte written at p[i] or read from p[i] into *out, by thread 0.
__global__ void write_byte(char* p, long long i) {
  if (threadIdx.x == 0) p[i] = 1;
}
__global__ void read_byte(const char* p, long long i, char* out) {
  if (threadIdx.x == 0) *out = p[i];
}

// Per lane: the xor partner's value, the value 3 lanes down and 2 lanes up, each within segments
// of 8 lanes.
__global__ void shuffles(int* out) {
  const int lane = int(threadIdx.x);
  const int v = 100 + lane;
  out[3 * lane] = __shfl_xor_sync(0xffffffffu, v, 5, 8);
  out[3 * lane + 1] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  out[3 * lane + 2] = __shfl_up_sync(0xffffffffu, v, 2, 8);
}

}  // namespace

TEST_CASE("rewrite_launches: launches with template arguments, long configurations, comments and strings",
          "[emulator]") {
  std::string error;
  int n = 0;
  const std::string src =
      "  k<T, R><<<unsigned(b), 256, 0,\n      static_cast<cudaStream_t>(s)>>>(p, q);\n"
      "  // not<<<a>>>(launch)\n  const char* t = \"x<<<y>>>\";\n  ns::plain<<<1, dim3(32, 2)>>>();\n";
  const std::string out = mg_emu::rewrite_launches(src, error, &n);
  INFO(out);
  CHECK(error.empty());
  CHECK(n == 2);
  CHECK(out.find("(::mg_emu::Launch(unsigned(b), 256, 0,\n      static_cast<cudaStream_t>(s)) | [=](auto&... mg_emu_a) "
                 "{ k<T, R>(mg_emu_a...); })(p, q);") != std::string::npos);
  CHECK(out.find("(::mg_emu::Launch(1, dim3(32, 2)) | [=](auto&... mg_emu_a) { ns::plain(mg_emu_a...); })();") !=
        std::string::npos);
  CHECK(out.find("// not<<<a>>>(launch)") != std::string::npos);
  CHECK(out.find("\"x<<<y>>>\"") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == std::count(src.begin(), src.end(), '\n'));  // lines kept
  mg_emu::rewrite_launches("  <<<1, 2>>>();", error);
  CHECK_THAT(error, Catch::Contains("cannot be parsed"));
  // Shared memory is filled with garbage once per block, on the declaration's line.
  error.clear();
  const std::string sh = mg_emu::rewrite_launches(
      "  alignas(16) __shared__ unsigned char raw[kN * sizeof(A)];\n  __shared__ A sh[2][32][33];\n  __shared__ bool last;\n"
      "  int my__shared__x;\n",
      error);
  CHECK(error.empty());
  CHECK(sh.find("raw[kN * sizeof(A)]; ::mg_emu::poison_shared(&raw, sizeof(raw));\n") != std::string::npos);
  CHECK(sh.find("sh[2][32][33]; ::mg_emu::poison_shared(&sh, sizeof(sh));\n") != std::string::npos);
  CHECK(sh.find("bool last; ::mg_emu::poison_shared(&last, sizeof(last));\n") != std::string::npos);
  CHECK(sh.find("int my__shared__x;\n") != std::string::npos);
}

TEST_CASE("CUDA emulator: a shared-memory tree reduction runs with real barriers, block by block", "[emulator]") {
  std::vector<float> host(3 * 64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = float(i % 17) - 4.0f;
  float* in = device_floats(host.size());
  float* out = device_floats(3);
  REQUIRE(cudaMemcpyAsync(in, host.data(), host.size() * 4, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
  (::mg_emu::Launch(3, 64, 0, nullptr) | [=](auto&... a) { block_sums(a...); })(in, out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<float> got(3);
  REQUIRE(cudaMemcpyAsync(got.data(), out, 12, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  for (int b = 0; b < 3; ++b) {
    float want = 0;
    for (int t = 0; t < 64; ++t) want += host[std::size_t(b * 64 + t)];
    CHECK(got[std::size_t(b)] == want);
  }
  CHECK(cudaFree(in) == cudaSuccess);
  CHECK(cudaFree(out) == cudaSuccess);
}

TEST_CASE("CUDA emulator: shuffles follow the GPU's lane and segment rules", "[emulator]") {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 3 * 32 * sizeof(int)) == cudaSuccess);
  int* out = static_cast<int*>(p);
  (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { shuffles(a...); })(out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> got(3 * 32);
  REQUIRE(cudaMemcpyAsync(got.data(), out, got.size() * sizeof(int), cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  for (int lane = 0; lane < 32; ++lane) {
    const int seg = lane & ~7;
    INFO("lane " << lane);
    CHECK(got[std::size_t(3 * lane)] == 100 + (seg + ((lane ^ 5) & 7)));                      // xor inside the segment
    CHECK(got[std::size_t(3 * lane + 1)] == 100 + ((lane & 7) + 3 < 8 ? lane + 3 : lane));   // down: own value past the end
    CHECK(got[std::size_t(3 * lane + 2)] == 100 + ((lane & 7) >= 2 ? lane - 2 : lane));      // up: own value before the start
  }
  CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("CUDA emulator: divergent barriers, a shuffle of an absent lane and an exception fail the kernel",
          "[emulator]") {
  const mg_emu::LaunchShape shape{dim3(2), dim3(64), 0};
  const ScheduleGuard forward({mg_emu::Order::Forward, 0});  // block (0, 0, 0) fails first
  // Half of warp 0 waits at the block's barrier, the other half at the warp's, each for the other:
  // a GPU hangs (warp 1 passes its own warp barrier and exits).
  std::string why = mg_emu::run_grid(shape, [](void*) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
  }, nullptr);
  CHECK_THAT(why, Catch::Contains("divergent barriers in block (0, 0, 0): 16 threads wait at __syncthreads, 16 at a warp barrier or "
                                   "shuffle, 32 have exited"));
  // Lane 5 reads lane 6, which exited without taking part.
  why = mg_emu::run_grid(mg_emu::LaunchShape{dim3(1), dim3(32), 0}, [](void*) {
    if (threadIdx.x == 6) return;
    (void)__shfl_sync(0xffffffffu, int(threadIdx.x), int(threadIdx.x) + 1);
  }, nullptr);
  CHECK_THAT(why, Catch::Contains("read lane 6 in a shuffle that lane did not take part in"));
  why = mg_emu::run_grid(mg_emu::LaunchShape{dim3(1), dim3(32), 0}, [](void*) {
    if (threadIdx.x == 3) throw std::runtime_error("boom");
  }, nullptr);
  CHECK_THAT(why, Catch::Contains("exception in a kernel thread: boom"));
  // The next launch runs normally.
  CHECK(mg_emu::run_grid(shape, [](void*) { __syncthreads(); }, nullptr) == "");
}

TEST_CASE("CUDA emulator: a thread that exited is not run again when a barrier opens", "[emulator]") {
  int count = 0;
  const std::string why = mg_emu::run_grid(mg_emu::LaunchShape{dim3(2), dim3(64), 0}, [](void* arg) {
    if (threadIdx.x >= 32) {
      atomicAdd(static_cast<int*>(arg), 1);
      return;
    }
    __syncthreads();
    __syncthreads();
  }, &count);
  CHECK(why.empty());
  CHECK(count == 2 * 32);
}

TEST_CASE("CUDA emulator: a launch on a stream of another device than the current one fails", "[emulator]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) {
    SUCCEED("one emulated device (MG_CUDA_EMULATOR_DEVICES=2 runs this)");
    return;
  }
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  float* out = device_floats(1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  (::mg_emu::Launch(1, 64, 0, s1) | [=](auto&... a) { block_sums(a...); })(out, out);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);  // on device 0
  CHECK(cudaEventRecord(e, s1) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CHECK(cudaEventDestroy(e) == cudaSuccess);
  CHECK(cudaFree(out) == cudaSuccess);
}

TEST_CASE("CUDA emulator: launch configurations a GPU refuses are launch errors", "[emulator]") {
  CHECK(mg_emu::invalid_launch_reason({dim3(0), dim3(32), 0}) == "an empty grid");
  CHECK(mg_emu::invalid_launch_reason({dim3(1), dim3(33, 32), 0}) == "1056 threads per block (at most 1024)");
  CHECK(mg_emu::invalid_launch_reason({dim3(1, 65536), dim3(32), 0}) == "a grid dimension above its limit");
  CHECK(mg_emu::invalid_launch_reason({dim3(1), dim3(1, 1, 65), 0}) ==
        "a block dimension above its limit (1024, 1024, 64)");
  CHECK(mg_emu::invalid_launch_reason({dim3(1), dim3(32), 49 * 1024}) == "more than 48 KiB of dynamic shared memory");
  CHECK(mg_emu::invalid_launch_reason({dim3(2147483647u), dim3(1024), 0}) == "");
  float* out = device_floats(1);
  (::mg_emu::Launch(0, 64, 0, nullptr) | [=](auto&... a) { block_sums(a...); })(out, out);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky, as on a GPU
  CHECK(cudaFree(out) == cudaSuccess);
}

TEST_CASE("CUDA emulator: fresh device memory reads as NaN, and the device's capacity is enforced", "[emulator]") {
  float* p = device_floats(5);
  std::vector<float> got(5);
  REQUIRE(cudaMemcpyAsync(got.data(), p, 20, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  for (float v : got) CHECK(std::isnan(v));
  CHECK(cudaFree(p) == cudaSuccess);
  void* huge = nullptr;
  CHECK(cudaMalloc(&huge, std::size_t(1) << 50) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  // A copy to memory that is not the device's is refused, as cudaMemcpy's kind check would.
  float host = 0;
  CHECK(cudaMemcpyAsync(&host, &host, 4, cudaMemcpyHostToDevice, nullptr) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("CUDA emulator: stream capture records and replays, and refuses what the runtime refuses", "[emulator]") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  float* buf = device_floats(64);
  float* sums = device_floats(1);
  // The legacy stream cannot be captured.
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  // A capture records the fill and the kernel without running them; each replay runs both.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(buf, 0, 64 * sizeof(float), s) == cudaSuccess);
  (::mg_emu::Launch(1, 64, 0, s) | [=](auto&... a) { block_sums(a...); })(buf, sums);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  float got = 0;
  REQUIRE(cudaMemcpyAsync(&got, sums, 4, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(std::isnan(got));  // not run yet
  std::size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 2);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(&got, sums, 4, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(got == 0.0f);
  // Inside a capture the thread may not allocate, synchronise or query events: the call fails
  // and the capture is invalidated.
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  for (int which = 0; which < 3; ++which) {
    INFO("call " << which);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    void* p = nullptr;
    const cudaError_t st = which == 0 ? cudaMalloc(&p, 16) : which == 1 ? cudaStreamSynchronize(s) : cudaEventQuery(e);
    CHECK(st == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr);
    (void)cudaGetLastError();
  }
  // In relaxed mode the allocation is allowed.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaSuccess);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(cudaEventDestroy(e) == cudaSuccess);
  CHECK(cudaFree(buf) == cudaSuccess);
  CHECK(cudaFree(sums) == cudaSuccess);
  CHECK(mg_emu::sticky_failure().empty());
}

namespace {

struct RunOrder {
  std::vector<unsigned> threads_round0, threads_round1, blocks;
};

// The order in which one launch of 3 x 2 blocks of 40 threads ran its blocks, and block (0, 0)'s
// threads before and after a barrier.
RunOrder record_order() {
  RunOrder r;
  const std::string why = mg_emu::run_grid(mg_emu::LaunchShape{dim3(3, 2), dim3(40), 0}, [](void* arg) {
    RunOrder& o = *static_cast<RunOrder*>(arg);
    const bool first_block = blockIdx.x == 0 && blockIdx.y == 0;
    if (threadIdx.x == 0) o.blocks.push_back(blockIdx.x + 3 * blockIdx.y);
    if (first_block) o.threads_round0.push_back(threadIdx.x);
    __syncthreads();
    if (first_block) o.threads_round1.push_back(threadIdx.x);
  }, &r);
  REQUIRE(why.empty());
  return r;
}

std::vector<unsigned> sorted(std::vector<unsigned> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("CUDA emulator: MG_CUDA_EMULATOR_ORDER's texts", "[emulator]") {
  mg_emu::Schedule s;
  CHECK(mg_emu::parse_schedule(nullptr, s).empty());
  CHECK(s.order == mg_emu::Order::Forward);
  CHECK(mg_emu::parse_schedule("reverse", s).empty());
  CHECK(s.order == mg_emu::Order::Reverse);
  CHECK(mg_emu::parse_schedule("shuffle:12345", s).empty());
  CHECK((s.order == mg_emu::Order::Shuffle && s.seed == 12345));
  CHECK(mg_emu::parse_schedule("shuffle", s).empty());
  CHECK((s.order == mg_emu::Order::Shuffle && s.seed == 0));
  CHECK(mg_emu::parse_schedule("forward", s).empty());
  CHECK(s.order == mg_emu::Order::Forward);
  CHECK_THAT(mg_emu::parse_schedule("backwards", s),
             Catch::Contains("MG_CUDA_EMULATOR_ORDER=backwards: expected forward, reverse, shuffle or shuffle:SEED"));
  CHECK_THAT(mg_emu::parse_schedule("shuffle:x", s), Catch::Contains("must be a non-negative integer"));
  CHECK_THAT(mg_emu::parse_schedule("shuffle:-3", s), Catch::Contains("must be a non-negative integer"));
  CHECK_THAT(mg_emu::parse_schedule("shuffle:", s), Catch::Contains("must be a non-negative integer"));
  CHECK_THAT(mg_emu::parse_schedule("shuffle7", s), Catch::Contains("expected forward"));
  CHECK(s.order == mg_emu::Order::Forward);  // a bad text leaves the schedule as it was
}

TEST_CASE("CUDA emulator: threads and blocks run forward, reverse or shuffled", "[emulator]") {
  std::vector<unsigned> ascending(40), blocks(6);
  std::iota(ascending.begin(), ascending.end(), 0u);
  std::iota(blocks.begin(), blocks.end(), 0u);
  {
    const ScheduleGuard g({mg_emu::Order::Forward, 0});
    const RunOrder r = record_order();
    CHECK(r.threads_round0 == ascending);
    CHECK(r.threads_round1 == ascending);
    CHECK(r.blocks == blocks);
  }
  {
    const ScheduleGuard g({mg_emu::Order::Reverse, 0});
    const RunOrder r = record_order();
    CHECK(r.threads_round0 == std::vector<unsigned>(ascending.rbegin(), ascending.rend()));
    CHECK(r.threads_round1 == std::vector<unsigned>(ascending.rbegin(), ascending.rend()));
    CHECK(r.blocks == std::vector<unsigned>(blocks.rbegin(), blocks.rend()));
  }
  const ScheduleGuard g({mg_emu::Order::Shuffle, 7});
  const RunOrder a = record_order(), b = record_order();
  // Every thread and block exactly once, in an order that is neither forward nor the same each round.
  CHECK(sorted(a.threads_round0) == ascending);
  CHECK(sorted(a.threads_round1) == ascending);
  CHECK(sorted(a.blocks) == blocks);
  CHECK(a.threads_round0 != ascending);
  CHECK(a.threads_round0 != a.threads_round1);
  CHECK(a.blocks != blocks);
  // The next launch runs another order; the same seed set again repeats the launches' orders.
  CHECK(b.threads_round0 != a.threads_round0);
  mg_emu::set_schedule({mg_emu::Order::Shuffle, 7});
  const RunOrder a2 = record_order(), b2 = record_order();
  CHECK(a2.threads_round0 == a.threads_round0);
  CHECK(a2.threads_round1 == a.threads_round1);
  CHECK(a2.blocks == a.blocks);
  CHECK(b2.threads_round0 == b.threads_round0);
  mg_emu::set_schedule({mg_emu::Order::Shuffle, 8});
  CHECK(record_order().threads_round0 != a.threads_round0);
}

TEST_CASE("CUDA emulator: another order exposes a race that the forward order hides, not a correct kernel",
          "[emulator]") {
  float* out = device_floats(32);
  auto run_race = [&] {
    (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { neighbour_without_barrier(a...); })(out);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> got(32);
    REQUIRE(cudaMemcpyAsync(got.data(), out, 32 * 4, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
    return got;
  };
  {
    // Forward: every thread but 0 finds its neighbour's value (thread 0 reads slot 31: garbage).
    const ScheduleGuard g({mg_emu::Order::Forward, 0});
    const std::vector<float> got = run_race();
    CHECK(std::isnan(got[0]));
    for (int t = 1; t < 32; ++t) CHECK(got[std::size_t(t)] == float(t - 1));
  }
  {
    // Reverse: threads 1..31 read their neighbour's slot before the neighbour wrote it (garbage);
    // thread 0, run last, finds thread 31's value.
    const ScheduleGuard g({mg_emu::Order::Reverse, 0});
    const std::vector<float> got = run_race();
    CHECK(got[0] == 31.0f);
    for (int t = 1; t < 32; ++t) CHECK(std::isnan(got[std::size_t(t)]));
  }
  CHECK(cudaFree(out) == cudaSuccess);
  // The tree reduction (barriers between every write and read) sums the same in every order.
  std::vector<float> host(4 * 64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = float(i % 13) * 0.25f - 1.0f;
  float* in = device_floats(host.size());
  float* sums = device_floats(4);
  REQUIRE(cudaMemcpyAsync(in, host.data(), host.size() * 4, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
  std::vector<std::vector<float>> results;
  for (const mg_emu::Schedule s : {mg_emu::Schedule{mg_emu::Order::Forward, 0}, mg_emu::Schedule{mg_emu::Order::Reverse, 0},
                                   mg_emu::Schedule{mg_emu::Order::Shuffle, 3}}) {
    const ScheduleGuard g(s);
    (::mg_emu::Launch(4, 64, 0, nullptr) | [=](auto&... a) { block_sums(a...); })(in, sums);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> got(4);
    REQUIRE(cudaMemcpyAsync(got.data(), sums, 16, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
    results.push_back(got);
  }
  CHECK(results[1] == results[0]);
  CHECK(results[2] == results[0]);
  CHECK(cudaFree(in) == cudaSuccess);
  CHECK(cudaFree(sums) == cudaSuccess);
}

namespace {

struct ChildOutcome {
  bool exited_normally = false;
  int exit_code = -1;
  std::string stderr_text;
};

// Runs `body` in a child process (a device fault is sticky for the whole process, so the faulting
// kernels of these tests run where nothing else needs the device afterwards): its stderr comes
// back, its stdout goes nowhere (Catch2's handler reports a fatal signal there).
ChildOutcome run_in_child(void (*body)()) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  ChildOutcome r;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) r.stderr_text.append(buf, std::size_t(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  r.exited_normally = WIFEXITED(status);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

char* device_bytes(std::size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) _exit(3);
  return static_cast<char*>(p);
}

void launch_write(char* p, long long i) {
  (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { write_byte(a...); })(p, i);
}

void launch_read(const char* p, long long i, char* out) {
  (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { read_byte(a...); })(p, i, out);
}

}  // namespace

TEST_CASE("CUDA emulator: device memory is exactly as long as asked: a kernel inside it runs as before",
          "[emulator]") {
  // Every byte of 1000, first and last included, may be read and written, and the allocation frees cleanly.
  char* p = device_bytes(1000);
  char* out = device_bytes(1);
  for (const long long i : {0LL, 999LL}) {
    launch_write(p, i);
    launch_read(p, i, out);
  }
  char got = 0;
  REQUIRE(cudaMemcpyAsync(&got, out, 1, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  CHECK(got == 1);
  // A copy of the 256-byte-rounded size reaches past the request: refused, as a range check.
  std::vector<char> host(1024);
  CHECK(cudaMemcpyAsync(host.data(), p, 1024, cudaMemcpyDeviceToHost, nullptr) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaMemcpyAsync(host.data(), p, 1000, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(cudaFree(out) == cudaSuccess);
  CHECK(mg_emu::sticky_failure().empty());
}

TEST_CASE("CUDA emulator: a kernel writing just past or before its allocation fails at cudaFree", "[emulator]") {
  for (const long long at : {1000LL, -1LL}) {
    INFO("byte " << at);
    static long long s_at;
    s_at = at;
    const ChildOutcome r = run_in_child([] {
      char* p = device_bytes(1000);
      launch_write(p, s_at);  // inside the 16-byte rounding, or in the padding before: no fault yet
      if (cudaGetLastError() != cudaSuccess) _exit(4);
      _exit(cudaFree(p) == cudaErrorLaunchFailure ? 10 : 11);
    });
    CHECK(r.exit_code == 10);
    CHECK_THAT(r.stderr_text, Catch::Contains("a kernel wrote byte " + std::to_string(at) +
                                              " of the device allocation of 1000 bytes"));
  }
}

TEST_CASE("CUDA emulator: a kernel touching memory past its allocation or after cudaFree faults, named",
          "[emulator]") {
  ChildOutcome r = run_in_child([] {
    char* p = device_bytes(1000);
    char* out = device_bytes(1);
    launch_read(p, 1008, out);  // the guard page after the 16-byte rounding
    (void)cudaDeviceSynchronize();  // a deferred stream runs it here
  });
  CHECK_FALSE(r.exited_normally);
  CHECK_THAT(r.stderr_text, Catch::Contains("CUDA emulator: a kernel touched byte 1008 of a device allocation of 1000 "
                                            "bytes"));
  r = run_in_child([] {
    char* p = device_bytes(4 * 252);  // 252 floats: a whole number of 16-byte vectors
    char* out = device_bytes(1);
    launch_read(p, 4 * 252, out);  // the first byte of float 252, one past the end
    (void)cudaDeviceSynchronize();
  });
  CHECK_FALSE(r.exited_normally);
  CHECK_THAT(r.stderr_text, Catch::Contains("touched byte 1008 of a device allocation of 1008 bytes"));
  r = run_in_child([] {
    char* p = device_bytes(64 * 1024);
    launch_write(p, -1);  // whole pages: no padding before it, the guard page in front
    (void)cudaDeviceSynchronize();  // a deferred stream runs it here
  });
  CHECK_FALSE(r.exited_normally);
  CHECK_THAT(r.stderr_text, Catch::Contains("touched byte -1 of a device allocation of 65536 bytes"));
  r = run_in_child([] {
    char* p = device_bytes(4096);
    char* out = device_bytes(1);
    if (cudaFree(p) != cudaSuccess) _exit(4);
    launch_read(p, 0, out);
    (void)cudaDeviceSynchronize();  // a deferred stream runs it here
  });
  CHECK_FALSE(r.exited_normally);
  CHECK_THAT(r.stderr_text, Catch::Contains("touched a device allocation of 4096 bytes after cudaFree"));
}

TEST_CASE("CUDA emulator: a vector load from a misaligned address stops the kernel, as a GPU faults", "[emulator]") {
#ifndef MG_EMU_ALIGNMENT_CHECK
  WARN("this compiler cannot link UBSan's alignment check (cmake/cuda_emulator.cmake): not checked");
  return;
#endif
  // Aligned: runs.
  ChildOutcome r = run_in_child([] {
    char* p = device_bytes(64);
    void* out = nullptr;
    if (cudaMalloc(&out, 4) != cudaSuccess) _exit(3);
    (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { read_vector(a...); })(p, 16LL, static_cast<float*>(out));
    _exit(cudaGetLastError() == cudaSuccess ? 0 : 4);
  });
  CHECK(r.exit_code == 0);
  // 4 bytes in: a GPU's "misaligned address"; UBSan's alignment check (the kernels' build flag).
  r = run_in_child([] {
    char* p = device_bytes(64);
    void* out = nullptr;
    if (cudaMalloc(&out, 4) != cudaSuccess) _exit(3);
    (::mg_emu::Launch(1, 32, 0, nullptr) | [=](auto&... a) { read_vector(a...); })(p, 4LL, static_cast<float*>(out));
    (void)cudaDeviceSynchronize();  // a deferred stream runs it here
  });
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.stderr_text, Catch::Contains("misaligned address"));
  CHECK_THAT(r.stderr_text, Catch::Contains("16 byte alignment"));
}

namespace {

// Turns deferred streams on for one test (queued work runs when it ends) and back as they were.
struct DeferredStreams {
  bool saved = mg_emu::deferred_streams_on();
  DeferredStreams() { mg_emu::set_deferred_streams(true); }
  ~DeferredStreams() { mg_emu::set_deferred_streams(saved); }
};

void launch_add_one(const float* in, float* out, int n, cudaStream_t s) {
  (::mg_emu::Launch(1, 64, 0, s) | [=](auto&... a) { add_one(a...); })(in, out, n);
}

cudaStream_t new_stream(unsigned flags) {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  return s;
}

// x, y, z of n floats on the device: x all ones (written and done), y and z fresh (NaN).
struct ThreeBuffers {
  float *x, *y, *z;
  explicit ThreeBuffers(int n) : x(device_floats(n)), y(device_floats(n)), z(device_floats(n)) {
    const std::vector<float> ones(std::size_t(n), 1.0f);
    REQUIRE(cudaMemcpyAsync(x, ones.data(), std::size_t(n) * 4, cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  ~ThreeBuffers() {
    for (float* p : {x, y, z}) CHECK(cudaFree(p) == cudaSuccess);
  }
};

std::vector<float> read_floats(const float* device, int n) {
  std::vector<float> host(std::size_t(n), 0.0f);
  REQUIRE(cudaMemcpyAsync(host.data(), device, std::size_t(n) * 4, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
  return host;  // pageable: the copy is done when the call returns
}

}  // namespace

TEST_CASE("CUDA emulator, deferred streams: a stream that reads without waiting sees the old bytes", "[emulator]") {
  const DeferredStreams deferred;
  const cudaStream_t a = new_stream(cudaStreamNonBlocking), b = new_stream(cudaStreamNonBlocking);
  const ThreeBuffers buffers(8);
  float *x = buffers.x, *y = buffers.y, *z = buffers.z;
  // a: y = x + 1; b: z = y + 1 with no wait on a. b runs first when b alone is synchronised.
  launch_add_one(x, y, 8, a);
  launch_add_one(y, z, 8, b);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(std::isnan(read_floats(z, 8)[0]));  // y was still fresh memory (NaN) when b read it
  // With the event wait, b's kernel runs after a's.
  cudaEvent_t done = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
  launch_add_one(x, y, 8, a);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(b, done, 0) == cudaSuccess);
  launch_add_one(y, z, 8, b);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(read_floats(z, 8) == std::vector<float>(8, 3.0f));
  // An event's first query before its stream got there says not ready; the GPU gets there after.
  launch_add_one(x, y, 8, a);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  CHECK(cudaEventQuery(done) == cudaErrorNotReady);
  (void)cudaGetLastError();
  CHECK(cudaEventQuery(done) == cudaSuccess);
  CHECK(read_floats(y, 8) == std::vector<float>(8, 2.0f));
  // Destroyed with its record still queued: freed when the record runs.
  launch_add_one(x, y, 8, a);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  CHECK(cudaEventDestroy(done) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(mg_emu::sticky_failure().empty());
}

TEST_CASE("CUDA emulator, deferred streams: pinned memory is read and written when the copy runs", "[emulator]") {
  const DeferredStreams deferred;
  const cudaStream_t s = new_stream(cudaStreamNonBlocking);
  float* d = device_floats(4);
  void* pinned_raw = nullptr;
  REQUIRE(cudaHostAlloc(&pinned_raw, 16, 0) == cudaSuccess);
  auto* pinned = static_cast<float*>(pinned_raw);
  // Host to device from pinned memory: the bytes the buffer holds when the copy runs.
  for (int i = 0; i < 4; ++i) pinned[i] = 5.0f;
  REQUIRE(cudaMemcpyAsync(d, pinned, 16, cudaMemcpyHostToDevice, s) == cudaSuccess);
  for (int i = 0; i < 4; ++i) pinned[i] = 6.0f;  // a bug on a GPU too: the copy may not have run
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(read_floats(d, 4) == std::vector<float>(4, 6.0f));
  // From pageable memory the runtime has read the bytes before returning.
  std::vector<float> pageable(4, 7.0f);
  REQUIRE(cudaMemcpyAsync(d, pageable.data(), 16, cudaMemcpyHostToDevice, s) == cudaSuccess);
  pageable.assign(4, 8.0f);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(read_floats(d, 4) == std::vector<float>(4, 7.0f));
  // Device to pinned host memory: written only when the stream gets there.
  for (int i = 0; i < 4; ++i) pinned[i] = 0.0f;
  REQUIRE(cudaMemcpyAsync(pinned, d, 16, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(pinned[0] == 0.0f);  // read before synchronising: the old bytes
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(pinned[0] == 7.0f);
  CHECK(cudaFreeHost(pinned_raw) == cudaSuccess);
  CHECK(cudaFree(d) == cudaSuccess);
}

TEST_CASE("CUDA emulator, deferred streams: the legacy stream waits for blocking streams, not for non-blocking ones",
          "[emulator]") {
  const DeferredStreams deferred;
  const cudaStream_t blocking = new_stream(cudaStreamDefault), non_blocking = new_stream(cudaStreamNonBlocking);
  const ThreeBuffers buffers(4);
  float *x = buffers.x, *y = buffers.y, *z = buffers.z;
  launch_add_one(x, y, 4, blocking);
  launch_add_one(y, z, 4, nullptr);  // the legacy stream: after the blocking stream's kernel
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(read_floats(z, 4) == std::vector<float>(4, 3.0f));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemsetAsync(y, 0xff, 16, nullptr) == cudaSuccess);
  launch_add_one(x, y, 4, non_blocking);
  launch_add_one(y, z, 4, nullptr);  // no wait for the non-blocking stream
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(std::isnan(read_floats(z, 4)[0]));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}
