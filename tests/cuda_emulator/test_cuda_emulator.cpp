// The CUDA emulator itself (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md; built only there): the
// launch rewrite, barriers and shared memory, the shuffles' lane rules, the failures a GPU would
// hang or compute garbage on, launch-configuration checks, fresh memory, and stream capture with
// the runtime's rules. The backend's own kernels are tested by every [gpu] case of the other folders.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/emulator/emulator.h"
#include "cuda/emulator/grid_runner.h"
#include "cuda/emulator/launch_rewrite.h"
// Last: it turns the CUDA keywords and threadIdx & co. into the emulator's.
#include "cuda/emulator/device_side.h"

namespace {

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
