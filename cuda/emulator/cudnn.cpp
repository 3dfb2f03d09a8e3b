// cuDNN's legacy convolution API on the CPU (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md): the calls
// cuda/dnn.cpp makes, with cuDNN's semantics — 4-D strided tensors, NCHW or NHWC filters, padding,
// stride, dilation, groups, cross-correlation, y = alpha conv + beta y (and the two gradients
// likewise), f32 accumulation for f32/f16/bf16 data (TF32-rounded f32 inputs unless the math type is
// CUDNN_FMA_MATH), f64 for f64. Two algorithms are offered per direction, deterministic both: 1 needs
// a 4 KiB workspace and is listed first, 0 needs none; running with less workspace than asked is
// CUDNN_STATUS_BAD_PARAM, as on a GPU. Shapes that do not form the convolution, mixed types and
// operands outside device memory are CUDNN_STATUS_BAD_PARAM.
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mixgrad/cuda/emulator/elements.h"
#include "mixgrad/cuda/emulator/emulator.h"

namespace {

struct HandleObject {
  cudaStream_t stream = nullptr;
};

struct TensorObject {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int dims[4] = {0, 0, 0, 0}, strides[4] = {0, 0, 0, 0};
};

struct FilterObject {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, r = 0, s = 0;
};

struct ConvObject {
  int ph = 0, pw = 0, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

constexpr std::size_t kAlgo1Workspace = 4096;

thread_local char t_last_error[256] = "";

cudnnStatus_t bad(const char* why) {
  std::snprintf(t_last_error, sizeof(t_last_error), "cuDNN emulator: %s", why);
  std::fprintf(stderr, "%s\n", t_last_error);
  return CUDNN_STATUS_BAD_PARAM;
}

cudaDataType_t element_type(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return CUDA_R_64F;
    case CUDNN_DATA_FLOAT: return CUDA_R_32F;
    case CUDNN_DATA_HALF: return CUDA_R_16F;
    case CUDNN_DATA_BFLOAT16: return CUDA_R_16BF;
    default: return CUDA_R_8I;  // element_size 0: refused below
  }
}

// One convolution problem, copied out of the descriptors at the call (they may change afterwards).
struct Problem {
  TensorObject x, y;
  FilterObject w;
  ConvObject conv;
  int64_t x_at(int n, int c, int h, int w_) const {
    return int64_t(n) * x.strides[0] + int64_t(c) * x.strides[1] + int64_t(h) * x.strides[2] + int64_t(w_) * x.strides[3];
  }
  int64_t y_at(int n, int k, int p, int q) const {
    return int64_t(n) * y.strides[0] + int64_t(k) * y.strides[1] + int64_t(p) * y.strides[2] + int64_t(q) * y.strides[3];
  }
  int64_t w_at(int k, int c, int r, int s) const {
    return w.format == CUDNN_TENSOR_NCHW ? ((int64_t(k) * w.c + c) * w.r + r) * w.s + s
                                         : ((int64_t(k) * w.r + r) * w.s + s) * w.c + c;
  }
  bool f64() const { return x.type == CUDNN_DATA_DOUBLE; }
  bool tf32() const { return x.type == CUDNN_DATA_FLOAT && conv.math != CUDNN_FMA_MATH; }
};

int64_t tensor_span(const TensorObject& t) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.dims[i] == 0) return 0;
    last += int64_t(t.dims[i] - 1) * t.strides[i];
  }
  return (last + 1) * int64_t(mg_emu::element_size(element_type(t.type)));
}

const char* problem_error(const Problem& p) {
  if (p.x.type != p.y.type || p.x.type != p.w.type) return "x, y and w differ in data type";
  if (mg_emu::element_size(element_type(p.x.type)) == 0) return "a data type the emulator does not have";
  const bool want_f64 = p.f64();
  if ((p.conv.compute == CUDNN_DATA_DOUBLE) != want_f64 || (!want_f64 && p.conv.compute != CUDNN_DATA_FLOAT)) {
    return "a compute type that does not go with the data type";
  }
  const ConvObject& c = p.conv;
  if (p.x.dims[2] + 2 * c.ph < c.dh * (p.w.r - 1) + 1 || p.x.dims[3] + 2 * c.pw < c.dw * (p.w.s - 1) + 1) {
    return "a filter larger than the padded input";
  }
  if (c.groups < 1 || p.x.dims[1] != p.w.c * c.groups || p.w.k % c.groups != 0) return "channels do not match the groups";
  if (p.y.dims[0] != p.x.dims[0] || p.y.dims[1] != p.w.k) return "y's batch or channels do not match";
  const int P = (p.x.dims[2] + 2 * c.ph - c.dh * (p.w.r - 1) - 1) / c.sh + 1;
  const int Q = (p.x.dims[3] + 2 * c.pw - c.dw * (p.w.s - 1) - 1) / c.sw + 1;
  if (p.y.dims[2] != P || p.y.dims[3] != Q) return "y's spatial size is not the convolution's";
  return "";
}

enum class Dir { Forward, Data, Filter };

// Runs one direction: out = alpha * result + beta * out, element by element.
void convolve(const Problem& p, Dir dir, double alpha, double beta, const void* X, const void* W, const void* Y,
              void* out) {
  const cudaDataType_t t = element_type(p.x.type);
  const bool f64 = p.f64(), tf32 = p.tf32();
  const int N = p.x.dims[0], C = p.x.dims[1], H = p.x.dims[2], Wd = p.x.dims[3];
  const int K = p.w.k, P = p.y.dims[2], Q = p.y.dims[3], R = p.w.r, S = p.w.s, Cg = p.w.c, Kg = K / p.conv.groups;
  auto in = [&](const void* base, int64_t i) {
    double v = mg_emu::load_element(base, t, i);
    return tf32 ? double(mg_emu::round_to_tf32(float(v))) : v;
  };
  // Accumulators of the output's elements, in its own index order.
  std::size_t count = dir == Dir::Forward ? std::size_t(N) * K * P * Q
                      : dir == Dir::Data  ? std::size_t(N) * C * H * Wd
                                          : std::size_t(K) * Cg * R * S;
  std::vector<double> acc64(f64 ? count : 0);
  std::vector<float> acc32(f64 ? 0 : count);
  auto add = [&](std::size_t i, double v) {
    if (f64) acc64[i] += v; else acc32[i] += float(v);
  };
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      const int g = k / Kg;
      for (int pp = 0; pp < P; ++pp) {
        for (int q = 0; q < Q; ++q) {
          for (int ci = 0; ci < Cg; ++ci) {
            for (int r = 0; r < R; ++r) {
              const int h = pp * p.conv.sh - p.conv.ph + r * p.conv.dh;
              if (h < 0 || h >= H) continue;
              for (int s = 0; s < S; ++s) {
                const int w = q * p.conv.sw - p.conv.pw + s * p.conv.dw;
                if (w < 0 || w >= Wd) continue;
                const int c = g * Cg + ci;
                switch (dir) {
                  case Dir::Forward:
                    add(((std::size_t(n) * K + k) * P + pp) * Q + q, in(X, p.x_at(n, c, h, w)) * in(W, p.w_at(k, ci, r, s)));
                    break;
                  case Dir::Data:
                    add(((std::size_t(n) * C + c) * H + h) * Wd + w, in(Y, p.y_at(n, k, pp, q)) * in(W, p.w_at(k, ci, r, s)));
                    break;
                  case Dir::Filter:
                    add(((std::size_t(k) * Cg + ci) * R + r) * S + s, in(X, p.x_at(n, c, h, w)) * in(Y, p.y_at(n, k, pp, q)));
                    break;
                }
              }
            }
          }
        }
      }
    }
  }
  auto finish = [&](std::size_t i, int64_t at) {
    double v = alpha * (f64 ? acc64[i] : double(acc32[i]));
    if (!f64) v = float(v);
    if (beta != 0) {
      const double old = beta * mg_emu::load_element(out, t, at);
      v = f64 ? v + old : double(float(v) + float(old));
    }
    mg_emu::store_element(out, t, at, v);
  };
  std::size_t i = 0;
  if (dir == Dir::Forward) {
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        for (int pp = 0; pp < P; ++pp)
          for (int q = 0; q < Q; ++q) finish(i++, p.y_at(n, k, pp, q));
  } else if (dir == Dir::Data) {
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int h = 0; h < H; ++h)
          for (int w = 0; w < Wd; ++w) finish(i++, p.x_at(n, c, h, w));
  } else {
    for (int k = 0; k < K; ++k)
      for (int ci = 0; ci < Cg; ++ci)
        for (int r = 0; r < R; ++r)
          for (int s = 0; s < S; ++s) finish(i++, p.w_at(k, ci, r, s));
  }
}

Problem problem(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                cudnnTensorDescriptor_t y) {
  return Problem{*reinterpret_cast<TensorObject*>(x), *reinterpret_cast<TensorObject*>(y),
                 *reinterpret_cast<FilterObject*>(w), *reinterpret_cast<ConvObject*>(conv)};
}

cudnnStatus_t run(cudnnHandle_t h, const Problem& p, Dir dir, int algo, const void* alpha, const void* beta,
                  const void* X, const void* W, const void* Y, void* out, void* ws, size_t ws_bytes) {
  if (const char* why = problem_error(p); *why != '\0') return bad(why);
  if (algo != 0 && algo != 1) return CUDNN_STATUS_NOT_SUPPORTED;
  if (algo == 1 && (ws_bytes < kAlgo1Workspace || !mg_emu::is_device_memory(ws, kAlgo1Workspace))) {
    return bad("algorithm 1 run without its 4 KiB device workspace");
  }
  const int64_t w_bytes = int64_t(p.w.k) * p.w.c * p.w.r * p.w.s * int64_t(mg_emu::element_size(element_type(p.w.type)));
  if (!mg_emu::is_device_memory(dir == Dir::Data ? Y : X, std::size_t(tensor_span(dir == Dir::Data ? p.y : p.x))) ||
      !mg_emu::is_device_memory(dir == Dir::Filter ? Y : W, std::size_t(dir == Dir::Filter ? tensor_span(p.y) : w_bytes)) ||
      !mg_emu::is_device_memory(out, std::size_t(dir == Dir::Forward ? tensor_span(p.y)
                                                  : dir == Dir::Data  ? tensor_span(p.x)
                                                                      : w_bytes))) {
    return bad("an operand outside device memory (or past the end of its allocation)");
  }
  const double a = p.f64() ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b = p.f64() ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  mg_emu::submit_task(reinterpret_cast<HandleObject*>(h)->stream, [=] {
    if (algo == 1) std::memset(ws, 0xff, kAlgo1Workspace);  // garbage: a workspace aliasing a tensor shows
    convolve(p, dir, a, b, X, W, Y, out);
  });
  return CUDNN_STATUS_SUCCESS;
}

template <typename Perf, typename Algo>
void list_algorithms(const Problem& p, int requested, int* returned, Perf* perf) {
  const bool ok = *problem_error(p) == '\0';
  int n = 0;
  for (int algo : {1, 0}) {
    if (n >= requested) break;
    Perf& r = perf[n++];
    r = Perf{};
    r.algo = Algo(algo);
    r.status = ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    r.time = -1;
    r.memory = algo == 1 ? kAlgo1Workspace : 0;
    r.determinism = CUDNN_DETERMINISTIC;
    r.mathType = p.conv.math;
  }
  *returned = n;
}

// Find*Ex: runs each algorithm on the given buffers (the output is overwritten) and times it.
template <typename Perf, typename Algo>
cudnnStatus_t find(cudnnHandle_t h, const Problem& p, Dir dir, const void* X, const void* W, const void* Y, void* out,
                   int requested, int* returned, Perf* perf, void* ws, size_t ws_bytes) {
  list_algorithms<Perf, Algo>(p, requested, returned, perf);
  const float one = 1, zero = 0;
  const double one64 = 1, zero64 = 0;
  for (int i = 0; i < *returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].memory > ws_bytes) {
      perf[i].status = CUDNN_STATUS_ALLOC_FAILED;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    perf[i].status = run(h, p, dir, int(perf[i].algo), p.f64() ? static_cast<const void*>(&one64) : &one,
                         p.f64() ? static_cast<const void*>(&zero64) : &zero, X, W, Y, out, ws, ws_bytes);
    mg_emu::run_stream_now(reinterpret_cast<HandleObject*>(h)->stream);  // Find*Ex blocks until its runs are done
    perf[i].time = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::stable_sort(perf, perf + *returned, [](const Perf& a, const Perf& b) {
    return (a.status == CUDNN_STATUS_SUCCESS) > (b.status == CUDNN_STATUS_SUCCESS);
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace(const Problem& p, int algo, size_t* bytes) {
  if (*problem_error(p) != '\0') return CUDNN_STATUS_NOT_SUPPORTED;
  if (algo != 0 && algo != 1) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = algo == 1 ? kAlgo1Workspace : 0;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (max_size == 0) return;
  std::snprintf(message, max_size, "%s", t_last_error);
  t_last_error[0] = '\0';
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = reinterpret_cast<cudnnHandle_t>(new HandleObject{});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  reinterpret_cast<HandleObject*>(handle)->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = reinterpret_cast<cudnnTensorDescriptor_t>(new TensorObject{});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete reinterpret_cast<TensorObject*>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, cudnnDataType_t type, int n, int c, int h, int w,
                                           int ns, int cs, int hs, int ws) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || ns <= 0 || cs <= 0 || hs <= 0 || ws <= 0) {
    return bad("a 4-D tensor descriptor with a dimension or stride below 1");
  }
  *reinterpret_cast<TensorObject*>(d) = TensorObject{type, {n, c, h, w}, {ns, cs, hs, ws}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = reinterpret_cast<cudnnFilterDescriptor_t>(new FilterObject{});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete reinterpret_cast<FilterObject*>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return bad("a filter descriptor with a dimension below 1");
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  *reinterpret_cast<FilterObject*>(d) = FilterObject{type, format, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = reinterpret_cast<cudnnConvolutionDescriptor_t>(new ConvObject{});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete reinterpret_cast<ConvObject*>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
  if (ph < 0 || pw < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1) return bad("a convolution descriptor out of range");
  if (mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;  // not emulated
  auto* c = reinterpret_cast<ConvObject*>(d);
  c->ph = ph, c->pw = pw, c->sh = sh, c->sw = sw, c->dh = dh, c->dw = dw, c->mode = mode, c->compute = compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (groups < 1) return bad("a group count below 1");
  reinterpret_cast<ConvObject*>(d)->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  reinterpret_cast<ConvObject*>(d)->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 2;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 2;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 2;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  list_algorithms<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(problem(x, w, conv, y), requested, returned,
                                                                           perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  list_algorithms<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(problem(dx, w, conv, dy), requested,
                                                                                   returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  list_algorithms<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(problem(x, dw, conv, dy),
                                                                                       requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void* x,
                                                     const cudnnFilterDescriptor_t wd, const void* w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t yd, void* y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf, void* ws,
                                                     size_t ws_bytes) {
  return find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(h, problem(xd, wd, conv, yd), Dir::Forward, x, w,
                                                                        nullptr, y, requested, returned, perf, ws, ws_bytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                          const void* w, const cudnnTensorDescriptor_t dyd,
                                                          const void* dy, const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dxd, void* dx,
                                                          const int requested, int* returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws,
                                                          size_t ws_bytes) {
  return find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      h, problem(dxd, wd, conv, dyd), Dir::Data, nullptr, w, dy, dx, requested, returned, perf, ws, ws_bytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                            const void* x, const cudnnTensorDescriptor_t dyd,
                                                            const void* dy, const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dwd, void* dw,
                                                            const int requested, int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws,
                                                            size_t ws_bytes) {
  return find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      h, problem(xd, dwd, conv, dyd), Dir::Filter, x, nullptr, dy, dw, requested, returned, perf, ws, ws_bytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* ws, size_t ws_bytes, const void* beta, const cudnnTensorDescriptor_t yd,
                                      void* y) {
  return run(h, problem(xd, wd, conv, yd), Dir::Forward, int(algo), alpha, beta, x, w, nullptr, y, ws, ws_bytes);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* ws, size_t ws_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  return run(h, problem(dxd, wd, conv, dyd), Dir::Data, int(algo), alpha, beta, nullptr, w, dy, dx, ws, ws_bytes);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes,
                                             const void* beta, const cudnnFilterDescriptor_t dwd, void* dw) {
  return run(h, problem(xd, dwd, conv, dyd), Dir::Filter, int(algo), alpha, beta, x, nullptr, dy, dw, ws, ws_bytes);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  return workspace(problem(x, w, conv, y), int(algo), bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return workspace(problem(dx, w, conv, dy), int(algo), bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return workspace(problem(x, dw, conv, dy), int(algo), bytes);
}

}  // extern "C"
