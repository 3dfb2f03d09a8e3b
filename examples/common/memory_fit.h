// "Does this batch size fit in memory?", answered before training starts rather than by the
// kernel's OOM killer an hour in. After a warm-up probe (one-time costs: JIT kernels, caches),
// two probe steps (8 and 32 samples; for a batch under 32, about a quarter of it and the batch)
// measure the larger of the process's peak resident memory and mixgrad's allocator peak, giving
// bytes per sample; the step at the requested batch size is
// predicted linearly and, with a safety margin of 1.25, compared with the memory the system has
// available (MemAvailable). Resident memory counts what oneDNN keeps outside our allocator
// (blocked-layout copies, scratchpads). Measured: ResNet-20 at batch 2048 was predicted at
// 2,460 MiB against a whole-process peak of 1,707 MiB: the estimate errs high, so a batch size
// close to the limit may be refused although it would have fit.
//
//   check_batch_fits([&](int64_t b) { forward_backward(b); }, flags.get_int("batch-size"));
//   // throws: "batch size 100000 needs about 96.1 GiB per process for one training step but
//   //          21.3 GiB are available\n  hint: use --batch-size 20000 or less"
#pragma once
#include <cstdint>
#include <functional>

namespace mg::example {

struct MemoryEstimate {
  double bytes_per_sample = 0;  // slope between the two probes
  double base_bytes = 0;        // intercept: weights, gradients, optimizer state, workspaces
  double predicted_bytes = 0;   // base + slope * batch_size (before the safety margin)
  int64_t available_bytes = -1; // MemAvailable, -1 when unknown (then nothing is checked)
  int64_t ranks_here = 1;       // processes sharing it (LOCAL_WORLD_SIZE)
};

// probe(b) runs one forward and backward pass on b samples (the caller restores whatever it
// changes: gradients, batch-norm statistics, random state); batch_size is this process's share of
// the step. Throws an mg::Error with a smaller --batch-size in its hint when kSafetyMargin times
// the predicted peak exceeds 90% of this process's share of the available memory: the memory
// divided among the LOCAL_WORLD_SIZE processes mixgrad-run started on this machine (1 when
// unset). `flag_batch_size` is the --batch-size the share comes from (the whole step over every
// rank; 0: batch_size), so the hint is a value for the flag.
inline constexpr double kSafetyMargin = 1.25;
MemoryEstimate check_batch_fits(const std::function<void(int64_t)>& probe, int64_t batch_size,
                                int64_t flag_batch_size = 0);

// MemAvailable from /proc/meminfo in bytes, -1 when unavailable; the environment variable
// MG_AVAILABLE_MEMORY (bytes) replaces it, to cap a run's memory (and to test the check).
int64_t available_memory_bytes();

}  // namespace mg::example
