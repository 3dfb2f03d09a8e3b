// cuDNN convolution (cuda/dnn.h) through cuDNN 9's legacy convolution API (why: the decision in
// cuda/host/dnn_conv_plan.h): handles per (device, thread), descriptors of one problem, the
// algorithm cache, the workspace and the call on the current stream; and the global switches
// set_cudnn_benchmark / set_cudnn_deterministic of cuda/cuda.h.
//
// Decisions:
// - Algorithms are chosen once per dnn_conv_key (shape, dtype, layout, geometry, math, modes,
//   device, alignment) and beta (1 when the output holds a bias), and cached behind a mutex as an
//   ordered candidate list: cuDNN's heuristic (cudnnGet*_v7, no device work) by default; with
//   set_cudnn_benchmark(true) every algorithm is run and timed (cudnnFind*Ex, a host
//   synchronisation, counted) and the list sorted by time.
// - The workspace is a u8 tensor from the caching allocator on the current stream, freed when the
//   call returns (stream-ordered reuse, as the GEMM workspace). When it does not fit even after
//   the allocator emptied its cache, the next candidate that needs less is tried
//   (next_workspace_fallback); an algorithm cuDNN refuses at run time (NOT_SUPPORTED) is dropped
//   from the cached list and the next one runs.
// - Numerics: compute type f32 for f16/bf16/f32 (one rounding of each output); the descriptor's
//   math type is the chosen candidate's (FMA for strict f32, never a conversion to f16).
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/conv_settings.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/dnn.h"
#include "mixgrad/cuda/dnn_check.h"

namespace mg::cuda {

namespace {

// cuDNN's message about its last failing call on this thread, as " (...)", or nothing.
std::string last_error_text() {
  char message[256] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message[0] ? str_cat(" (", message, ")") : std::string();
}

}  // namespace

namespace detail {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  MG_THROW(CudaError, "cuDNN error: ", call, " returned ", cudnnGetErrorString(status), " on ",
           known ? "cuda:" + std::to_string(device) : "an unknown device", last_error_text(), " [", file, ":", line,
           "]");
}

}  // namespace detail

namespace {

std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{false};

// ---- handles: one per (device, thread), recycled through a pool when a thread ends ----

class HandlePool {
 public:
  cudnnHandle_t take(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (std::size_t(device) < free_.size() && !free_[std::size_t(device)].empty()) {
        cudnnHandle_t h = free_[std::size_t(device)].back();
        free_[std::size_t(device)].pop_back();
        return h;
      }
    }
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    MG_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  void give_back(int device, cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() <= std::size_t(device)) free_.resize(std::size_t(device) + 1);
    free_[std::size_t(device)].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<cudnnHandle_t>> free_;  // per device
};

HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool();  // never destroyed (threads give back at exit)
  return *pool;
}

struct ThreadHandles {
  std::vector<cudnnHandle_t> by_device;
  ~ThreadHandles() {
    for (std::size_t d = 0; d < by_device.size(); ++d) {
      if (by_device[d]) handle_pool().give_back(int(d), by_device[d]);
    }
  }
};

cudnnHandle_t dnn_handle(int device) {
  thread_local ThreadHandles handles;
  if (handles.by_device.size() <= std::size_t(device)) handles.by_device.resize(std::size_t(device) + 1, nullptr);
  cudnnHandle_t& h = handles.by_device[std::size_t(device)];
  if (!h) h = handle_pool().take(device);
  return h;
}

// ---- descriptors (owned, destroyed at scope end) ----

struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors() {
    MG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    MG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    MG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    MG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  }
  ~Descriptors() {
    if (x) (void)cudnnDestroyTensorDescriptor(x);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: MG_ASSERT(false, "cuDNN: no data type for ", dtype_name(dt));
  }
  return CUDNN_DATA_FLOAT;
}

cudnnMathType_t to_cudnn(DnnMath m) {
  switch (m) {
    case DnnMath::Default: return CUDNN_DEFAULT_MATH;
    case DnnMath::TensorOp: return CUDNN_TENSOR_OP_MATH;
    case DnnMath::TensorOpAllowConversion: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case DnnMath::Fma: return CUDNN_FMA_MATH;
  }
  return CUDNN_DEFAULT_MATH;
}

DnnMath from_cudnn(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return DnnMath::Default;
    case CUDNN_TENSOR_OP_MATH: return DnnMath::TensorOp;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return DnnMath::TensorOpAllowConversion;
    case CUDNN_FMA_MATH: return DnnMath::Fma;
  }
  return DnnMath::TensorOpAllowConversion;  // unknown: treated as not allowed
}

void set_tensor(cudnnTensorDescriptor_t d, DType dt, const DnnTensorParams& t) {
  MG_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(d, data_type(dt), int(t.dims[0]), int(t.dims[1]), int(t.dims[2]),
                                              int(t.dims[3]), int(t.strides[0]), int(t.strides[1]),
                                              int(t.strides[2]), int(t.strides[3])));
}

void make_descriptors(const DnnConvProblem& p, Descriptors& d) {
  set_tensor(d.x, p.dtype, dnn_x_params(p));
  set_tensor(d.y, p.dtype, dnn_y_params(p));
  const std::array<int64_t, 4> f = dnn_filter_dims(p);
  const cudnnTensorFormat_t format = p.layout == ConvLayout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  MG_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(d.w, data_type(p.dtype), format, int(f[0]), int(f[1]), int(f[2]), int(f[3])));
  const ConvDims& g = p.g;
  MG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, int(g.ph), int(g.pw), int(g.sh), int(g.sw), int(g.dh),
                                                 int(g.dw), CUDNN_CROSS_CORRELATION,
                                                 data_type(conv_compute_dtype(p.dtype))));
  MG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, int(g.groups)));
  MG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, to_cudnn(p.math)));
}

template <typename Perf>
std::vector<DnnAlgoResult> to_results(const std::vector<Perf>& perf, int n, bool timed) {
  std::vector<DnnAlgoResult> r;
  for (int i = 0; i < n; ++i) {
    const Perf& q = perf[std::size_t(i)];
    r.push_back({.algo = int(q.algo),
                 .ok = q.status == CUDNN_STATUS_SUCCESS,
                 .time_ms = timed ? q.time : -1.0f,
                 .workspace = q.memory,
                 .deterministic = q.determinism == CUDNN_DETERMINISTIC,
                 .math = from_cudnn(q.mathType)});
  }
  return r;
}

// cuDNN's ranked list from its heuristic (no device work).
std::vector<DnnAlgoResult> heuristic(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d) {
  int max = 0, n = 0;
  switch (p.dir) {
    case ConvDirection::Forward: {
      MG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, max, &n, perf.data()));
      return to_results(perf, n, false);
    }
    case ConvDirection::BackwardInput: {
      MG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, max, &n, perf.data()));
      return to_results(perf, n, false);
    }
    case ConvDirection::BackwardWeight: {
      MG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, max, &n, perf.data()));
      return to_results(perf, n, false);
    }
  }
  return {};
}

// Every algorithm run and timed by cuDNN on these buffers (the output buffer is overwritten).
std::vector<DnnAlgoResult> measure(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d, void* x, void* w,
                                   void* y, void* ws, std::size_t ws_bytes) {
  detail::check_host_wait("cuDNN's algorithm search (cudnnFind*Ex, benchmark mode) for a convolution shape not seen before",
                          HostWait::Stream, current_device());
  detail::count_sync();  // Find*Ex waits for the device to time each algorithm
  int max = 0, n = 0;
  switch (p.dir) {
    case ConvDirection::Forward: {
      MG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x, d.w, w, d.conv, d.y, y, max, &n, perf.data(),
                                                            ws, ws_bytes));
      return to_results(perf, n, true);
    }
    case ConvDirection::BackwardInput: {
      MG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, w, d.y, y, d.conv, d.x, x, max, &n,
                                                                 perf.data(), ws, ws_bytes));
      return to_results(perf, n, true);
    }
    case ConvDirection::BackwardWeight: {
      MG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::size_t(std::max(max, 1)));
      MG_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, x, d.y, y, d.conv, d.w, w, max, &n,
                                                                   perf.data(), ws, ws_bytes));
      return to_results(perf, n, true);
    }
  }
  return {};
}

cudnnStatus_t execute(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d, int algo, void* x, void* w,
                      void* y, void* ws, std::size_t ws_bytes, bool accumulate) {
  const double alpha64 = 1.0, beta64 = accumulate ? 1.0 : 0.0;
  const float alpha32 = 1.0f, beta32 = accumulate ? 1.0f : 0.0f;
  const bool f64 = p.dtype == DType::F64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  switch (p.dir) {
    case ConvDirection::Forward:
      return cudnnConvolutionForward(h, alpha, d.x, x, d.w, w, d.conv, cudnnConvolutionFwdAlgo_t(algo), ws, ws_bytes,
                                     beta, d.y, y);
    case ConvDirection::BackwardInput:
      return cudnnConvolutionBackwardData(h, alpha, d.w, w, d.y, y, d.conv, cudnnConvolutionBwdDataAlgo_t(algo), ws,
                                          ws_bytes, beta, d.x, x);
    case ConvDirection::BackwardWeight:
      return cudnnConvolutionBackwardFilter(h, alpha, d.x, x, d.y, y, d.conv, cudnnConvolutionBwdFilterAlgo_t(algo),
                                            ws, ws_bytes, beta, d.w, w);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// cuDNN's workspace size for `algo` at the descriptor's current math type.
cudnnStatus_t workspace_size(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d, int algo,
                             std::size_t* bytes) {
  switch (p.dir) {
    case ConvDirection::Forward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo), bytes);
    case ConvDirection::BackwardInput:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo),
                                                          bytes);
    case ConvDirection::BackwardWeight:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                            cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// The heuristic's and Find's `memory` figures are asked again of cuDNN for the math type each
// candidate runs with, and the larger kept: a run given less workspace than cuDNN wants fails
// with CUDNN_STATUS_BAD_PARAM instead of moving to the next candidate. A candidate whose size cuDNN
// refuses to give is dropped (a dropped list ends in dnn_no_algo_message). The descriptor's math
// type is left at the problem's.
void settle_workspaces(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d, std::vector<DnnAlgoChoice>& list,
                       DnnFilterStats& stats) {
  std::vector<DnnAlgoChoice> kept;
  for (DnnAlgoChoice c : list) {
    MG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, to_cudnn(c.math)));
    std::size_t bytes = 0;
    const cudnnStatus_t status = workspace_size(h, p, d, c.algo, &bytes);
    // Not supported, or BAD_PARAM (no size for this algorithm at this math type): not runnable.
    if (dnn_status_refuses(int(status)) || status == CUDNN_STATUS_BAD_PARAM) {
      ++stats.no_workspace;
      continue;
    }
    detail::check_cudnn(status, "cudnnGetConvolution*WorkspaceSize", __FILE__, __LINE__);
    c.workspace = std::max(c.workspace, bytes);
    kept.push_back(c);
  }
  MG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, to_cudnn(p.math)));
  list = std::move(kept);
}

// ---- the algorithm cache ----

struct AlgoCache {
  std::mutex mutex;
  std::map<std::vector<int64_t>, std::vector<DnnAlgoChoice>> entries;
};
AlgoCache& algo_cache() {
  static AlgoCache* c = new AlgoCache();  // never destroyed (used until exit)
  return *c;
}

// A u8 workspace of `bytes` on the device (undefined for 0). Throws OutOfMemoryError.
Tensor workspace(std::size_t bytes, int device) {
  if (bytes == 0) return Tensor();
  return empty({int64_t(bytes)}, {.dtype = DType::U8, .device = Device::cuda(device)});
}

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

int64_t output_bytes(const DnnConvProblem& p) {
  const ConvDims& g = p.g;
  const int64_t n = p.dir == ConvDirection::Forward         ? g.N * g.O * g.Ho * g.Wo
                    : p.dir == ConvDirection::BackwardInput ? g.N * g.C * g.H * g.W
                                                            : g.O * g.cg() * g.kk();
  return n * int64_t(dtype_size(p.dtype));
}

// The cache's key: the problem's, and whether the output is accumulated into (beta = 1). cuDNN may
// refuse an algorithm at run time for beta = 1 only; that refusal must not drop it for beta = 0.
std::vector<int64_t> cache_key(const DnnConvProblem& p, bool accumulate) {
  std::vector<int64_t> key = dnn_conv_key(p);
  key.push_back(accumulate ? 1 : 0);
  return key;
}

// The candidates of `p`: from the cache, else chosen now (and cached). Throws when none is left.
std::vector<DnnAlgoChoice> candidates(const char* op, cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d,
                                      void* x, void* w, void* y, bool accumulate) {
  const std::vector<int64_t> key = cache_key(p, accumulate);
  AlgoCache& cache = algo_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (auto it = cache.entries.find(key); it != cache.entries.end()) return it->second;
  }
  const std::vector<DnnAlgoResult> ranked = heuristic(h, p, d);
  std::vector<DnnAlgoResult> offered = ranked;
  bool timed = p.benchmark;
  Tensor scratch;
  if (timed && accumulate) {
    // The output buffer is overwritten by every algorithm tried: a scratch one when it holds a bias.
    // No memory for it: the heuristic's ranking, untimed (the convolution itself still runs).
    try {
      scratch = workspace(std::size_t(output_bytes(p)), p.device);
    } catch (const OutOfMemoryError&) {
      timed = false;
    }
  }
  if (timed) {
    void* out = p.dir == ConvDirection::Forward ? y : p.dir == ConvDirection::BackwardInput ? x : w;
    if (accumulate) out = scratch.data_ptr();
    void* xx = p.dir == ConvDirection::BackwardInput ? out : x;
    void* ww = p.dir == ConvDirection::BackwardWeight ? out : w;
    void* yy = p.dir == ConvDirection::Forward ? out : y;
    std::size_t ws_bytes = find_workspace_bytes(ranked);
    Tensor ws;
    try {
      ws = workspace(ws_bytes, p.device);
    } catch (const OutOfMemoryError&) {
      ws_bytes = 0;  // only algorithms without a workspace can be timed
    }
    offered = measure(h, p, d, xx, ww, yy, ptr(ws), ws_bytes);
  }
  DnnFilterStats stats;
  std::vector<DnnAlgoChoice> list = filter_conv_algos(offered, p, timed, &stats);
  settle_workspaces(h, p, d, list, stats);
  MG_CHECK(!list.empty(), NotImplementedError, dnn_no_algo_message(op, p, stats, int(offered.size())));
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, list);
  return list;
}

void drop_candidate(const DnnConvProblem& p, bool accumulate, const DnnAlgoChoice& c) {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.entries.find(cache_key(p, accumulate));
  if (it == cache.entries.end()) return;
  std::vector<DnnAlgoChoice>& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
  if (v.empty()) cache.entries.erase(it);
}

// Runs candidates on cuDNN: the workspace from the caching allocator (its OutOfMemoryError kept
// for the caller when nothing smaller is left), the descriptor's math type set per candidate.
class CudnnRunner final : public DnnRunner {
 public:
  CudnnRunner(cudnnHandle_t h, const DnnConvProblem& p, const Descriptors& d, void* x, void* w, void* y,
              bool accumulate)
      : h_(h), p_(p), d_(d), x_(x), w_(w), y_(y), accumulate_(accumulate) {}
  bool take_workspace(std::size_t bytes) override {
    ws_ = Tensor();  // the previous candidate's block goes back first
    try {
      ws_ = workspace(bytes, p_.device);
    } catch (const OutOfMemoryError&) {
      oom_ = std::current_exception();
      return false;
    }
    bytes_ = bytes;
    return true;
  }
  bool run(const DnnAlgoChoice& c) override {
    MG_CUDNN_CHECK(cudnnSetConvolutionMathType(d_.conv, to_cudnn(c.math)));
    const cudnnStatus_t status = execute(h_, p_, d_, c.algo, x_, w_, y_, ptr(ws_), bytes_, accumulate_);
    // cuDNN 9 refuses with sub-codes of the NOT_SUPPORTED category (_SHAPE, _LAYOUT,
    // _SHARED_MEMORY_INSUFFICIENT, ...), not only the category's own value: those mean "try the next
    // candidate". The category's installation codes (driver, runtime, architecture, a missing
    // sub-library) are raised below with their name (dnn_status_refuses).
    if (dnn_status_refuses(int(status))) {
      last_refusal_ = str_cat(cudnnGetErrorString(status), last_error_text());
      return false;
    }
    const std::string call = std::string("cudnnConvolution (") + dnn_direction_name(p_.dir) + ", algorithm " +
                             std::to_string(c.algo) + ")";
    detail::check_cudnn(status, call.c_str(), __FILE__, __LINE__);
    return true;
  }
  std::exception_ptr oom() const { return oom_; }
  const std::string& last_refusal() const { return last_refusal_; }

 private:
  cudnnHandle_t h_;
  const DnnConvProblem& p_;
  const Descriptors& d_;
  void *x_, *w_, *y_;
  bool accumulate_;
  Tensor ws_;
  std::size_t bytes_ = 0;
  std::exception_ptr oom_;
  std::string last_refusal_;  // the status (and cuDNN's message) of the last refused run
};

}  // namespace

void run_dnn_conv(const char* op, const DnnConvProblem& p, void* x, void* w, void* y, bool accumulate) {
  DeviceGuard guard(p.device);
  const cudnnHandle_t h = dnn_handle(p.device);
  MG_CUDNN_CHECK(cudnnSetStream(h, static_cast<cudaStream_t>(current_stream(p.device).handle())));
  Descriptors d;
  make_descriptors(p, d);
  const std::vector<DnnAlgoChoice> list = candidates(op, h, p, d, x, w, y, accumulate);
  CudnnRunner runner(h, p, d, x, w, y, accumulate);
  const DnnRunResult r = run_candidates(list, runner);
  for (const std::size_t i : r.refused) drop_candidate(p, accumulate, list[i]);  // refused at run time: not offered again
  switch (r.outcome) {
    case DnnRunOutcome::Ran: return;
    case DnnRunOutcome::OutOfMemory: std::rethrow_exception(runner.oom());  // names the size and the statistics
    case DnnRunOutcome::AllRefused:
      MG_THROW(NotImplementedError, op, ": cuDNN refused every ", dnn_direction_name(p.dir),
               " algorithm it offered for ", describe(p),
               runner.last_refusal().empty() ? std::string() : "\n  last refusal: " + runner.last_refusal(),
               "\n  hint: try the other layout (NCHW or channels-last) or another dtype");
  }
}

void set_cudnn_benchmark(bool on) { g_benchmark.store(on); }
bool cudnn_benchmark() { return g_benchmark.load(); }
void set_cudnn_deterministic(bool on) { g_deterministic.store(on); }
bool cudnn_deterministic() { return g_deterministic.load(); }

std::size_t cudnn_algo_cache_size() {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.entries.size();
}

void clear_cudnn_algo_cache() {
  AlgoCache& cache = algo_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.clear();
}

int cudnn_version() { return int(cudnnGetVersion()); }

}  // namespace mg::cuda
