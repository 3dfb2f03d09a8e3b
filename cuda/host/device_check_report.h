// Value checks that run on the device without stopping the host: a bad index or class target
// found by a CUDA kernel (index_select, gather, scatter_add, embedding, one_hot, cross_entropy,
// cross_entropy_backward, nll_loss, max_pool2d_backward) is written into one report slot per device, in host-mapped
// memory, and raised as the CPU's IndexError at the host's next wait for that device (item(),
// to(cpu), printing, cuda::synchronize(), Stream/Event::synchronize, MG_CUDA_SYNC=1's wait after
// every launch).
//
// Decision: before this the checks read a device flag back at every call (one host
// synchronisation per op with a non-empty index), so no eager step with a cross-entropy loss or
// an embedding could be free of host syncs. Deferred, the error surfaces at most one wait later,
// names the op, the bad value and the accepted range (the CPU's text without the operand
// descriptions the device cannot see), and a step captured in a CUDA graph reports too. The
// kernels never read or write out of bounds meanwhile: a bad index reads nothing (zeros out,
// scatter_add never matches it) and a bad target counts as ignored. MG_CUDA_SYNC=1 raises the
// error at the op that launched the check.
//
// This header is plain C++: the layout is shared by the kernels that publish a report
// (cuda/kernels/device_check.cuh) and by the host code that takes, formats and clears it, which
// the CPU tests exercise on ordinary memory (tests/cuda/test_device_check_report.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace mg::cuda {

// Which check failed; fixes the op name and the message's wording.
enum class DeviceCheck : int32_t {
  IndexSelect = 1,       // 0 <= index < size along dim
  Gather,                // "
  ScatterAdd,            // "
  Embedding,             // 0 <= index < rows
  OneHot,                // 0 <= value < num_classes
  CrossEntropy,          // 0 <= target < classes, or ignore_index
  CrossEntropyBackward,  // "
  NllLoss,               // "
  MaxPool2dBackward,     // an index that is a tap of its own output's window
};

// One device's report, in host-mapped memory. A launch that finds bad values publishes its first
// one (row-major order): the kernel claims the device's slot (an atomic on a word in device
// memory: device atomics on host memory are not portable), writes these fields with plain
// stores, fences system-wide and sets `complete`. While a report waits for the host, a later
// failing check only sets `dropped` (the first error is the one raised; the message says others
// followed). The host takes a complete report (take_device_check_report), re-arms the claim word
// on the device and waits for that (cuda/device_checks.cpp), then reads and clears `dropped`.
struct DeviceCheckReport {
  uint32_t complete;  // 1 once the fields below are written
  uint32_t dropped;   // set by a later check that failed while this report held the slot
  int32_t check;      // a DeviceCheck
  int32_t reserved;
  int64_t value;      // the first bad value of the launch
  int64_t bound;      // the size along dim (index ops), the rows (embedding), the classes, the plane height
  int64_t extra;      // dim (index ops), ignore_index (class targets), the plane width (max_pool2d_backward)
  int64_t detail[3];  // max_pool2d_backward: the plane and the output row and column of the bad index
};

// What a check kernel is given: the device's claim word and its report, as the device addresses
// them.
struct DeviceCheckSlot {
  unsigned int* claimed;  // device memory: 0 free, 1 while a report waits for the host
  DeviceCheckReport* report;
};

static_assert(sizeof(DeviceCheckReport) == 64, "the report's layout is shared by host and device code");

// The complete report in *report, whose `complete` is then cleared; nullopt when there is none or
// one is still being written (it stays for a later call). Of several host threads calling at
// once, one takes it. The caller then re-arms the device's claim word.
std::optional<DeviceCheckReport> take_device_check_report(DeviceCheckReport* report);

// The CPU's error text for the same bad value (without the operand descriptions), and a note
// naming the device and the host wait that raised it.
// `later_failures`: whether other checks failed while the report waited (their details are lost).
std::string device_check_message(const DeviceCheckReport& report, int device, const std::string& raised_at,
                                 bool later_failures = false);

// Reads and clears the report's `dropped` flag (after the claim word is re-armed).
bool take_dropped_flag(DeviceCheckReport* report);

}  // namespace mg::cuda
