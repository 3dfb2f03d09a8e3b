// cuBLASLt, loaded on first use. Linking libcublasLt maps it at every process start, GPU or not:
// its relocations alone take about 210 MiB of resident memory and 0.1 s (a program that only
// links it: 211 MiB max RSS against 1 MiB), which every CPU run and every test process of a CUDA
// build paid. So mixgrad does not link it: this file defines the cuBLASLt functions cuda/blas.cpp
// calls (the real build only; the emulator defines them in cuda/emulator/cublaslt.cpp), and each
// forwards to the library that the first call opens with dlopen. The rest of cuda/ calls cuBLASLt
// as if it were linked.
//
// Where the library comes from: its soname for the toolkit's major version (the dynamic loader's
// search: LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache), else the toolkit's library folder
// found at configure time (MG_CUBLASLT_DIR). A library that cannot be opened, or lacks a function,
// is a CudaError naming it and the reason, at the first GEMM.
#include <cublasLt.h>
#include <dlfcn.h>
#include <link.h>

#include <string>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/cuda.h"

#ifndef MG_CUBLASLT_DIR
#define MG_CUBLASLT_DIR ""
#endif

namespace mg::cuda {

namespace {

// Every cuBLASLt function mixgrad calls.
#define MG_CUBLASLT_FUNCTIONS(X)                                                                                  \
  X(cublasLtGetVersion)                                                                                           \
  X(cublasLtGetStatusName)                                                                                        \
  X(cublasLtGetStatusString)                                                                                      \
  X(cublasLtCreate)                                                                                               \
  X(cublasLtMatmulDescCreate)                                                                                     \
  X(cublasLtMatmulDescDestroy)                                                                                    \
  X(cublasLtMatmulDescSetAttribute)                                                                               \
  X(cublasLtMatrixLayoutCreate)                                                                                   \
  X(cublasLtMatrixLayoutDestroy)                                                                                  \
  X(cublasLtMatrixLayoutSetAttribute)                                                                             \
  X(cublasLtMatmulPreferenceCreate)                                                                               \
  X(cublasLtMatmulPreferenceDestroy)                                                                              \
  X(cublasLtMatmulPreferenceSetAttribute)                                                                         \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                               \
  X(cublasLtMatmul)

struct CublasLt {
  std::string path;  // the file that was opened
#define MG_POINTER(name) decltype(&::name) name = nullptr;
  MG_CUBLASLT_FUNCTIONS(MG_POINTER)
#undef MG_POINTER
};

std::string soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

const CublasLt* open_library() {
  void* handle = dlopen(soname().c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = handle ? "" : dlerror();
  const std::string fallback = std::string(MG_CUBLASLT_DIR) + "/" + soname();
  if (!handle && !std::string(MG_CUBLASLT_DIR).empty()) {
    handle = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) why += "; " + std::string(dlerror());
  }
  MG_CHECK(handle, CudaError, "cuBLASLt could not be loaded: ", why,
           "\n  hint: install the CUDA Toolkit's cuBLAS component (", soname(),
           ") or add its folder to LD_LIBRARY_PATH");
  auto* lib = new CublasLt;  // kept for the process's life, as a linked library would be
  link_map* map = nullptr;
  lib->path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_name : soname();
#define MG_RESOLVE(name)                                                                                           \
  lib->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));                                          \
  MG_CHECK(lib->name, CudaError, "cuBLASLt: ", lib->path, " has no function " #name                              \
           "\n  hint: mixgrad was built against CUDA ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR,                 \
           "; install a cuBLAS of that major version");
  MG_CUBLASLT_FUNCTIONS(MG_RESOLVE)
#undef MG_RESOLVE
  return lib;
}

// The library, opened by the first call (a failed open is retried by the next one).
const CublasLt& lt() {
  static const CublasLt* lib = open_library();
  return *lib;
}

}  // namespace

std::string blas_library() {
  const size_t v = lt().cublasLtGetVersion();
  return "cuBLASLt " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100) + " (" + lt().path + ", loaded on first use)";
}

}  // namespace mg::cuda

// The forwarding definitions, with cublasLt.h's prototypes.
extern "C" {

using mg::cuda::lt;

size_t CUBLASWINAPI cublasLtGetVersion(void) { return lt().cublasLtGetVersion(); }
const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) { return lt().cublasLtGetStatusName(status); }
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  return lt().cublasLtGetStatusString(status);
}
cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) { return lt().cublasLtCreate(handle); }
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  return lt().cublasLtMatmulDescCreate(desc, compute, scale);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return lt().cublasLtMatmulDescDestroy(desc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t size) {
  return lt().cublasLtMatmulDescSetAttribute(desc, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  return lt().cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return lt().cublasLtMatrixLayoutDestroy(layout);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                             size_t size) {
  return lt().cublasLtMatrixLayoutSetAttribute(layout, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return lt().cublasLtMatmulPreferenceCreate(pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return lt().cublasLtMatmulPreferenceDestroy(pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t size) {
  return lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                           cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                           cublasLtMatmulPreference_t pref, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[],
                                                           int* returned) {
  return lt().cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, requested, results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                                           cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_size,
                                           cudaStream_t stream) {
  return lt().cublasLtMatmul(handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo, workspace,
                             workspace_size, stream);
}

}  // extern "C"
