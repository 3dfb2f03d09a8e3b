// cuBLASLt's matmul on the CPU (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md): the calls cuda/blas.cpp
// makes, with cuBLASLt's documented semantics — column-major layouts with leading dimensions and
// strided batches, op N/T, D = alpha op(A) op(B) + beta C (+ bias[row] under CUBLASLT_EPILOGUE_BIAS),
// f32 accumulation for f32/f16/bf16 data (oneDNN's sgemm on the widened operands, TF32-rounded
// under CUBLAS_COMPUTE_32F_FAST_TF32), f64 for f64, one rounding to D's type. A layout inconsistent with the product, or an operand
// outside device memory, is CUBLAS_STATUS_INVALID_VALUE (on a GPU: an error or a fault), so the
// backend's descriptor choices are checked by every emulated GEMM.
#include <cublasLt.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "mixgrad/cuda/emulator/elements.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/emulator/emulator.h"

namespace {

struct LayoutObject {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};

struct DescObject {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;
};

struct PreferenceObject {
  uint64_t workspace = 0;
};

// The emulated algorithm asks for a workspace of this many bytes (at most the preference's
// maximum), so the backend's workspace path runs; it fills the workspace with garbage at each
// call, so a workspace that aliases a live tensor shows.
constexpr uint64_t kAlgoWorkspace = 4096;

template <typename T>
bool read_attribute(T& out, const void* buf, size_t bytes) {
  if (bytes != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

cublasStatus_t invalid(const char* why) {
  std::fprintf(stderr, "cuBLASLt emulator: %s\n", why);
  return CUBLAS_STATUS_INVALID_VALUE;
}

bool supported(const DescObject& d, cudaDataType_t ab, cudaDataType_t out) {
  if (d.compute == CUBLAS_COMPUTE_64F) return ab == CUDA_R_64F && out == CUDA_R_64F && d.scale == CUDA_R_64F;
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32) return false;
  if (d.scale != CUDA_R_32F) return false;
  if (ab == CUDA_R_32F) return out == CUDA_R_32F;
  if (ab == CUDA_R_16F || ab == CUDA_R_16BF) return out == ab || out == CUDA_R_32F;
  return false;
}

// op(A) op(B) of one batch entry into acc (column-major M x N, ld M), in f32 through oneDNN's sgemm
// for f32/f16/bf16 data (16-bit operands widened exactly, TF32 rounding applied first when asked)
// and in f64 term by term for f64 data.
void product(const DescObject& d, const LayoutObject& la, const LayoutObject& lb, uint64_t M, uint64_t N,
             uint64_t K, bool tf32, const void* A, const void* B, std::vector<double>& acc) {
  acc.assign(M * N, 0.0);
  if (M == 0 || N == 0) return;
  if (la.type == CUDA_R_64F) {
    for (uint64_t col = 0; col < N; ++col) {
      for (uint64_t row = 0; row < M; ++row) {
        double sum = 0;
        for (uint64_t k = 0; k < K; ++k) {
          const int64_t ia = d.ta == CUBLAS_OP_N ? int64_t(row + k * la.ld) : int64_t(k + row * la.ld);
          const int64_t ib = d.tb == CUBLAS_OP_N ? int64_t(k + col * lb.ld) : int64_t(col + k * lb.ld);
          sum += static_cast<const double*>(A)[ia] * static_cast<const double*>(B)[ib];
        }
        acc[row + col * M] = sum;
      }
    }
    return;
  }
  // Both operands as f32 arrays with their own layouts (the columns a layout spans).
  auto widen = [&](const void* p, const LayoutObject& l) {
    const uint64_t n = l.rows == 0 || l.cols == 0 ? 0 : (l.rows - 1) + (l.cols - 1) * uint64_t(l.ld) + 1;
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i) {
      const float f = float(mg_emu::load_element(p, l.type, int64_t(i)));
      v[i] = tf32 ? mg_emu::round_to_tf32(f) : f;
    }
    return v;
  };
  const std::vector<float> a = widen(A, la), b = widen(B, lb);
  std::vector<float> out(M * N, 0.0f);
  if (K > 0) {
    // Column-major D = op(A) op(B) is row-major D^T = op(B)^T op(A)^T: oneDNN's row-major sgemm
    // with the operands swapped, each read with its own leading dimension.
    dnnl_sgemm(d.tb == CUBLAS_OP_N ? 'N' : 'T', d.ta == CUBLAS_OP_N ? 'N' : 'T', dnnl_dim_t(N), dnnl_dim_t(M),
               dnnl_dim_t(K), 1.0f, b.data(), lb.ld, a.data(), la.ld, 0.0f, out.data(), dnnl_dim_t(M));
  }
  for (uint64_t i = 0; i < M * N; ++i) acc[i] = out[i];
}

void matmul(const DescObject& d, const LayoutObject& la, const LayoutObject& lb, const LayoutObject& lc,
            const LayoutObject& lo, double al, double be, bool tf32, const void* A, const void* B, const void* C,
            void* D) {
  const bool f64 = d.compute == CUBLAS_COMPUTE_64F;
  const cudaDataType_t bias_type = d.bias_type >= 0 ? cudaDataType_t(d.bias_type) : lo.type;
  const uint64_t M = lo.rows, N = lo.cols, K = d.ta == CUBLAS_OP_N ? la.cols : la.rows;
  const std::size_t ea_bytes = mg_emu::element_size(la.type), eb_bytes = mg_emu::element_size(lb.type);
  std::vector<double> acc;
  for (int32_t e = 0; e < lo.batch; ++e) {
    product(d, la, lb, M, N, K, tf32, static_cast<const char*>(A) + e * la.batch_stride * int64_t(ea_bytes),
            static_cast<const char*>(B) + e * lb.batch_stride * int64_t(eb_bytes), acc);
    const int64_t ec = e * lc.batch_stride, eo = e * lo.batch_stride;
    for (uint64_t col = 0; col < N; ++col) {
      for (uint64_t row = 0; row < M; ++row) {
        double v = al * acc[row + col * M];
        if (!f64) v = float(v);
        if (be != 0) {
          const double cv = be * mg_emu::load_element(C, lc.type, ec + int64_t(row + col * lc.ld));
          v = f64 ? v + cv : double(float(v) + float(cv));
        }
        if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) {
          const double bv = mg_emu::load_element(d.bias, bias_type, int64_t(row));
          v = f64 ? v + bv : double(float(v) + float(bv));
        }
        mg_emu::store_element(D, lo.type, eo + int64_t(row + col * lo.ld), v);
      }
    }
  }
}

// The product's shape: op(A) is M x K, op(B) K x N, D M x N; "" when consistent.
const char* shape_error(const DescObject& d, const LayoutObject& a, const LayoutObject& b, const LayoutObject& c,
                        const LayoutObject& o) {
  const uint64_t am = d.ta == CUBLAS_OP_N ? a.rows : a.cols, ak = d.ta == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = d.tb == CUBLAS_OP_N ? b.rows : b.cols, bn = d.tb == CUBLAS_OP_N ? b.cols : b.rows;
  if (am != o.rows || bn != o.cols || ak != bk) return "op(A), op(B) and D do not form a product";
  if (c.rows != o.rows || c.cols != o.cols) return "C and D differ in shape";
  for (const LayoutObject* l : {&a, &b, &c, &o}) {
    if (l->ld < int64_t(std::max<uint64_t>(l->rows, 1))) return "a leading dimension below the row count";
  }
  if (a.batch != o.batch || b.batch != o.batch || c.batch != o.batch) return "batch counts differ";
  return "";
}

// Bytes a layout's elements span (0 for an empty matrix).
uint64_t span_bytes(const LayoutObject& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const uint64_t last = (l.rows - 1) + (l.cols - 1) * uint64_t(l.ld) + uint64_t(l.batch - 1) * uint64_t(l.batch_stride);
  return (last + 1) * mg_emu::element_size(l.type);
}

}  // namespace

extern "C" {

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static int dummy;
  *handle = reinterpret_cast<cublasLtHandle_t>(&dummy);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new DescObject{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<DescObject*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  auto* d = reinterpret_cast<DescObject*>(desc);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read_attribute(d->ta, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read_attribute(d->tb, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = read_attribute(d->epilogue, buf, bytes) &&
           (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT || d->epilogue == CUBLASLT_EPILOGUE_BIAS);
      if (!ok) return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attribute(d->bias, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = read_attribute(d->bias_type, buf, bytes); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new LayoutObject{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<LayoutObject*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  auto* l = reinterpret_cast<LayoutObject*>(layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read_attribute(l->batch, buf, bytes) && l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attribute(l->batch_stride, buf, bytes) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new PreferenceObject{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<PreferenceObject*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  auto* p = reinterpret_cast<PreferenceObject*>(pref);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return read_attribute(p->workspace, buf, bytes) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  // Alignments and reduction schemes constrain the choice of kernel; the emulator has one kernel,
  // which honours all of them (no split-K).
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  const auto& dd = *reinterpret_cast<DescObject*>(desc);
  const auto &la = *reinterpret_cast<LayoutObject*>(a), &lb = *reinterpret_cast<LayoutObject*>(b),
             &lc = *reinterpret_cast<LayoutObject*>(c), &lo = *reinterpret_cast<LayoutObject*>(d);
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (la.type != lb.type || lc.type != lo.type || !supported(dd, la.type, lo.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (const char* why = shape_error(dd, la, lb, lc, lo); *why != '\0') return invalid(why);
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].workspaceSize = std::min(kAlgoWorkspace, reinterpret_cast<PreferenceObject*>(pref)->workspace);
  results[0].algo.data[0] = results[0].workspaceSize;  // what cublasLtMatmul will require
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const DescObject dd = *reinterpret_cast<DescObject*>(desc);
  const LayoutObject la = *reinterpret_cast<LayoutObject*>(a), lb = *reinterpret_cast<LayoutObject*>(b),
                     lc = *reinterpret_cast<LayoutObject*>(c), lo = *reinterpret_cast<LayoutObject*>(d);
  if (la.type != lb.type || lc.type != lo.type || !supported(dd, la.type, lo.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (const char* why = shape_error(dd, la, lb, lc, lo); *why != '\0') return invalid(why);
  if (!mg_emu::is_device_memory(A, span_bytes(la)) || !mg_emu::is_device_memory(B, span_bytes(lb)) ||
      !mg_emu::is_device_memory(C, span_bytes(lc)) || !mg_emu::is_device_memory(D, span_bytes(lo))) {
    return invalid("an operand outside device memory (or past the end of its allocation)");
  }
  const uint64_t need = algo != nullptr ? algo->data[0] : 0;
  if (need > 0 && (workspace_bytes < need || !mg_emu::is_device_memory(workspace, need))) {
    return invalid("the algorithm run without the device workspace its heuristic asked for");
  }
  const cudaDataType_t bias_type = dd.bias_type >= 0 ? cudaDataType_t(dd.bias_type) : lo.type;
  if (dd.epilogue == CUBLASLT_EPILOGUE_BIAS &&
      (dd.bias == nullptr || !mg_emu::is_device_memory(dd.bias, lo.rows * mg_emu::element_size(bias_type)))) {
    return invalid("the bias epilogue without a device bias vector of D's row count");
  }
  // alpha and beta are host values (the default pointer mode), read now as cuBLASLt does.
  const bool f64 = dd.compute == CUBLAS_COMPUTE_64F;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const bool tf32 = dd.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && la.type == CUDA_R_32F;
  mg_emu::submit_task(stream, [=] {
    if (need > 0) std::memset(workspace, 0xff, need);
    matmul(dd, la, lb, lc, lo, al, be, tf32, A, B, C, D);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace mg::cuda {
std::string blas_library() { return "cuBLASLt emulated on the CPU (cuda/emulator)"; }
}  // namespace mg::cuda
