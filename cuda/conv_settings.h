// The cuDNN convolution's switches (docs/cuda.md, "Convolution"), PyTorch's
// torch.backends.cudnn.benchmark / .deterministic. Includes no CUDA header; in a build without the
// backend they are plain flags and the cache is always empty. f32 convs follow cuda::allow_tf32()
// (cuda/cuda.h), the GEMMs' switch: strict f32 unless it is on.
//
//   mg::cuda::set_cudnn_benchmark(true);      // time every algorithm once per configuration
//   mg::cuda::set_cudnn_deterministic(true);  // only algorithms that repeat bit for bit
#pragma once
#include <cstddef>

namespace mg::cuda {

// Benchmark mode: the first conv of each configuration runs and times every algorithm cuDNN
// offers and keeps them fastest first (one host synchronisation per new configuration, counted by
// sync_count()); off (the default): cuDNN's heuristic picks, with no device work.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();
// Deterministic mode: only algorithms cuDNN reports deterministic (off by default, as in PyTorch:
// the default may pick backward algorithms that use atomics).
void set_cudnn_deterministic(bool on);
bool cudnn_deterministic();
// Configurations in the algorithm cache (both modes are part of its key); clear_cudnn_algo_cache()
// forgets them all.
std::size_t cudnn_algo_cache_size();
void clear_cudnn_algo_cache();
// cuDNN's version as cudnnGetVersion() reports it (e.g. 91900); 0 in a build without the backend.
int cudnn_version();

}  // namespace mg::cuda
