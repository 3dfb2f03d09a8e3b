// GPU timing shared by the CUDA benchmarks (bench_cuda, bench_cudnn_conv, bench_attention):
// milliseconds per call of `fn` on the current stream, the best of 5 batches of `reps` calls,
// timed with CUDA events after one untimed call and a synchronisation (so first-call work, e.g.
// cuDNN's algorithm search in benchmark mode, stays outside the timing).
#pragma once
#include <algorithm>
#include <functional>

#include "cuda/cuda.h"

namespace bench {

inline double cuda_ms_per_call(int reps, const std::function<void()>& fn) {
  fn();
  mg::cuda::synchronize();
  double best = 1e300;
  for (int batch = 0; batch < 5; ++batch) {
    mg::cuda::Event start, end;
    start.record();
    for (int r = 0; r < reps; ++r) fn();
    end.record();
    end.synchronize();
    best = std::min(best, double(start.elapsed_ms(end)) / reps);
  }
  return best;
}

}  // namespace bench
