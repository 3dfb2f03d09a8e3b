// cuBLASLt execution (cuda/blas.h): handles per (device, thread), the heuristic cache, the
// descriptors of one plan, the workspace and the call (or the loop of calls) on the current stream.
#include "mixgrad/cuda/blas.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/blas_check.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/cuda.h"

namespace mg::cuda {

namespace detail {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  MG_THROW(CudaError, "cuBLAS error: ", call, " returned ", cublasLtGetStatusName(status), " (",
           cublasLtGetStatusString(status), ") on ", known ? "cuda:" + std::to_string(device) : "an unknown device",
           " [", file, ":", line, "]");
}

}  // namespace detail

namespace {

// ---- handles: one per (device, thread), recycled through a pool when a thread ends ----

class HandlePool {
 public:
  cublasLtHandle_t take(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (std::size_t(device) < free_.size() && !free_[std::size_t(device)].empty()) {
        cublasLtHandle_t h = free_[std::size_t(device)].back();
        free_[std::size_t(device)].pop_back();
        return h;
      }
    }
    DeviceGuard guard(device);
    cublasLtHandle_t h = nullptr;
    MG_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }
  void give_back(int device, cublasLtHandle_t h) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() <= std::size_t(device)) free_.resize(std::size_t(device) + 1);
    free_[std::size_t(device)].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<cublasLtHandle_t>> free_;  // per device
};

HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool();  // never destroyed (threads give back at exit)
  return *pool;
}

struct ThreadHandles {
  std::vector<cublasLtHandle_t> by_device;
  ~ThreadHandles() {
    for (std::size_t d = 0; d < by_device.size(); ++d) {
      if (by_device[d]) handle_pool().give_back(int(d), by_device[d]);
    }
  }
};

cublasLtHandle_t lt_handle(int device) {
  thread_local ThreadHandles handles;
  if (handles.by_device.size() <= std::size_t(device)) handles.by_device.resize(std::size_t(device) + 1, nullptr);
  cublasLtHandle_t& h = handles.by_device[std::size_t(device)];
  if (!h) h = handle_pool().take(device);
  return h;
}

// ---- descriptors (owned, destroyed at scope end) ----

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) (void)cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) (void)cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) (void)cublasLtMatmulPreferenceDestroy(p);
  }
};

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::F64: return CUDA_R_64F;
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: MG_ASSERT(false, "cuBLASLt: no data type for ", dtype_name(dt));
  }
  return CUDA_R_32F;
}

cublasComputeType_t compute_type(GemmCompute c) {
  switch (c) {
    case GemmCompute::F64: return CUBLAS_COMPUTE_64F;
    case GemmCompute::F32: return CUBLAS_COMPUTE_32F;
    case GemmCompute::F32FastTf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}

void make_layout(Layout& out, const LtMatrix& x, int64_t batch_count, cudaDataType_t type) {
  MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.l, type, uint64_t(x.rows), uint64_t(x.cols), int64_t(x.ld)));
  if (batch_count > 1) {
    const int32_t count = int32_t(batch_count);
    const int64_t stride = x.batch_stride;
    MG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MG_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

// ---- the heuristic cache ----

struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};

struct HeuristicCache {
  std::mutex mutex;
  std::map<std::vector<int64_t>, CachedAlgo> entries;
};
HeuristicCache& heuristic_cache() {
  static HeuristicCache* c = new HeuristicCache();
  return *c;
}

}  // namespace

std::size_t gemm_heuristic_cache_size() {
  HeuristicCache& cache = heuristic_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.entries.size();
}

bool run_gemm(const GemmPlan& plan, int device) {
  MG_ASSERT(plan.kind == GemmKind::Matmul && !plan.copy_a && !plan.copy_b, "run_gemm: not a ready matmul plan: ",
            describe(plan));
  DeviceGuard guard(device);
  const cudaStream_t stream = static_cast<cudaStream_t>(current_stream(device).handle());
  const cublasLtHandle_t handle = lt_handle(device);
  const cudaDataType_t type = data_type(plan.dtype);
  const cudaDataType_t scale_type = plan.compute == GemmCompute::F64 ? CUDA_R_64F : CUDA_R_32F;

  MatmulDesc desc;
  MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, compute_type(plan.compute), scale_type));
  const cublasOperation_t ta = plan.A.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = plan.B.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (plan.c_mode == GemmCMode::Bias) {
    // The bias has the output's type, out_dtype (the default of CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    MG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &plan.bias, sizeof(plan.bias)));
  }
  Layout a, b, d;
  make_layout(a, plan.A, plan.batch_count, type);
  make_layout(b, plan.B, plan.batch_count, type);
  make_layout(d, plan.D, plan.batch_count, data_type(plan.out_dtype));  // C is D (read only for CopyToOut, beta != 0)

  // The algorithm: from the cache, else from the heuristic (then cached, found or not).
  const std::vector<int64_t> key = heuristic_key(plan, device);
  CachedAlgo chosen;
  bool cached = false;
  {
    HeuristicCache& cache = heuristic_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (auto it = cache.entries.find(key); it != cache.entries.end()) {
      chosen = it->second;
      cached = true;
    }
  }
  if (!cached) {
    Preference pref;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t workspace = kGemmWorkspaceBytes;
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                         sizeof(workspace)));
    const uint32_t align_a = uint32_t(plan.A.alignment), align_b = uint32_t(plan.B.alignment),
                   align_d = uint32_t(plan.D.alignment);
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                         sizeof(align_a)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                         sizeof(align_b)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                         sizeof(align_d)));
    MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                         sizeof(align_d)));
    if (plan.f32_reductions_only) {
      // f16/bf16: split-K partial sums stay in f32; never summed in (rounded to) the output type.
      // With the bias epilogue no split-K at all (GemmPlan::no_split_k).
      const uint32_t mask = plan.no_split_k ? uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE)
                                            : uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
      MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                           sizeof(mask)));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, desc.d, a.l, b.l, d.l, d.l, pref.p, 1, &result, &returned);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
      detail::check_cublas(status, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__);
    }
    chosen.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (chosen.found) {
      chosen.algo = result.algo;
      chosen.workspace = result.workspaceSize;
    }
    HeuristicCache& cache = heuristic_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.emplace(key, chosen);
  }
  if (!chosen.found) return false;

  // Workspace: exactly what the algorithm needs, from the caching allocator on this stream.
  Tensor workspace;
  void* workspace_ptr = nullptr;
  if (chosen.workspace > 0) {
    workspace = empty({int64_t(chosen.workspace)}, {.dtype = DType::U8, .device = Device::cuda(device)});
    workspace_ptr = workspace.data_ptr();
  }

  const double alpha64 = plan.alpha, beta64 = plan.beta;
  const float alpha32 = float(plan.alpha), beta32 = float(plan.beta);
  const void* alpha = plan.compute == GemmCompute::F64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = plan.compute == GemmCompute::F64 ? static_cast<const void*>(&beta64) : &beta32;
  const int64_t es = int64_t(dtype_size(plan.dtype)), es_out = int64_t(dtype_size(plan.out_dtype));

  // One call per index of the loop dims (one call when there are none).
  const std::size_t nd = plan.loop.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t oa = 0, ob = 0, oo = 0;  // element offsets of a, b and out
  const int64_t calls = shape_numel(plan.loop);
  for (int64_t call = 0; call < calls; ++call) {
    const char* A = static_cast<const char*>(plan.A.ptr) + ob * es;
    const char* B = static_cast<const char*>(plan.B.ptr) + oa * es;
    char* D = static_cast<char*>(const_cast<void*>(plan.D.ptr)) + oo * es_out;
    MG_CUBLAS_CHECK(cublasLtMatmul(handle, desc.d, alpha, A, a.l, B, b.l, beta, D, d.l, D, d.l, &chosen.algo,
                                   workspace_ptr, chosen.workspace, stream));
    for (std::size_t i = nd; i-- > 0;) {
      if (++idx[i] < plan.loop[i]) {
        oa += plan.loop_a[i];
        ob += plan.loop_b[i];
        oo += plan.loop_out[i];
        break;
      }
      oa -= (plan.loop[i] - 1) * plan.loop_a[i];
      ob -= (plan.loop[i] - 1) * plan.loop_b[i];
      oo -= (plan.loop[i] - 1) * plan.loop_out[i];
      idx[i] = 0;
    }
  }
  return true;
}

}  // namespace mg::cuda
