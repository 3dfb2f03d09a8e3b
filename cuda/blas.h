// cuBLASLt execution of a GEMM plan (cuda/host/gemm_plan.h). Internal to cuda/; includes no CUDA
// header. The linear-algebra kernels (cuda/linalg_kernels.cpp) prepare what the plan asks for
// (contiguous copies, c copied into out) and call run_gemm.
//
// Decisions:
// - One cuBLASLt handle per (device, thread), made on first use; a thread that ends gives its
//   handles back to a per-device pool for the next thread (handles are never destroyed: at exit
//   the CUDA context may already be gone).
// - The algorithm comes from cublasLtMatmulAlgoGetHeuristic once per heuristic_key() (dtypes,
//   compute type, ops, shapes, leading dims, batch, epilogue, alignments, device) and is cached
//   behind a mutex, so a training step asks the heuristic only on its first step.
// - The workspace (at most kGemmWorkspaceBytes, exactly what the chosen algorithm needs, often 0)
//   is a u8 tensor taken from the caching allocator for each call on the current stream and freed
//   right after: the allocator reuses the block only on that stream, after the GEMM in stream
//   order, so no per-stream workspace has to be kept or invalidated, and the reuse costs a lookup.
//
//   if (!mg::cuda::run_gemm(plan, device)) { ... no algorithm: plan differently and retry ... }
#pragma once
#include <cstddef>
#include <cstdint>

#include "mixgrad/cuda/host/gemm_plan.h"

namespace mg::cuda {

inline constexpr std::size_t kGemmWorkspaceBytes = std::size_t(32) << 20;  // 32 MiB

// Runs a Matmul plan (no copies pending; for CopyToOut, c is already in out) on the current
// stream of `device`. Returns false, having written nothing, when cuBLASLt's heuristic offers no
// algorithm for the plan (remembered in the cache; the caller retries with another plan); any
// other failure throws CudaError.
bool run_gemm(const GemmPlan& plan, int device);

// Entries of the heuristic cache (for tests and benchmarks); 0 in a build without the backend
// (cuda/absent/cuda_absent.cpp).
std::size_t gemm_heuristic_cache_size();

}  // namespace mg::cuda
