#include "mixgrad/cuda/host/device_check_report.h"

#include "mixgrad/core/error.h"

namespace mg::cuda {

std::optional<DeviceCheckReport> take_device_check_report(DeviceCheckReport* report) {
  // The device writes this memory (host-mapped) with plain stores and a system-wide fence before
  // `complete`; host-side atomics order the field reads after it and let one host thread win.
  if (__atomic_load_n(&report->complete, __ATOMIC_ACQUIRE) == 0) return std::nullopt;
  uint32_t expected = 1;
  if (!__atomic_compare_exchange_n(&report->complete, &expected, 0u, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return std::nullopt;  // another host thread took it
  DeviceCheckReport r{};
  r.check = __atomic_load_n(&report->check, __ATOMIC_RELAXED);
  r.value = __atomic_load_n(&report->value, __ATOMIC_RELAXED);
  r.bound = __atomic_load_n(&report->bound, __ATOMIC_RELAXED);
  r.extra = __atomic_load_n(&report->extra, __ATOMIC_RELAXED);
  for (int k = 0; k < 3; ++k) r.detail[k] = __atomic_load_n(&report->detail[k], __ATOMIC_RELAXED);
  return r;
}

namespace {

const char* index_op_name(DeviceCheck c) {
  switch (c) {
    case DeviceCheck::IndexSelect: return "index_select";
    case DeviceCheck::Gather: return "gather";
    case DeviceCheck::ScatterAdd: return "scatter_add";
    case DeviceCheck::CrossEntropy: return "cross_entropy";
    case DeviceCheck::CrossEntropyBackward: return "cross_entropy_backward";
    case DeviceCheck::NllLoss: return "nll_loss";
    default: return nullptr;
  }
}

// The CPU kernels' texts (ops/cpu/indexing_kernels.cpp, norm_kernels.cpp, loss_kernels.cpp) up to
// their operand descriptions.
std::string cpu_text(const DeviceCheckReport& r) {
  const auto c = static_cast<DeviceCheck>(r.check);
  const int64_t v = r.value, n = r.bound;
  switch (c) {
    case DeviceCheck::IndexSelect:
    case DeviceCheck::Gather:
    case DeviceCheck::ScatterAdd:
      return str_cat(index_op_name(c), ": index ", v, " is out of range for dim ", r.extra, " of size ", n,
                     " (expected 0 <= index < ", n, ")");
    case DeviceCheck::Embedding:
      return str_cat("embedding: index ", v, " is out of range for a table of ", n, " rows\n  hint: indices must lie in [0, ",
                     n, ")");
    case DeviceCheck::OneHot:
      return str_cat("one_hot: class value ", v, " is out of range for num_classes = ", n, " (expected 0 <= value < ", n,
                     ")");
    case DeviceCheck::CrossEntropy:
    case DeviceCheck::CrossEntropyBackward:
    case DeviceCheck::NllLoss:
      return str_cat(index_op_name(c), ": target ", v, " is out of range for ", n, " classes (expected 0 <= target < ", n,
                     " or ignore_index ", r.extra, ")\n  hint: labels must be class indices; mark padding with ignore_index");
    case DeviceCheck::MaxPool2dBackward:
      return str_cat("max_pool2d_backward: index ", v, " at output (", r.detail[1], ", ", r.detail[2], ") of plane ",
                     r.detail[0], " is not an element of that output's window in the ", n, " x ", r.extra,
                     " input plane\n  hint: pass max_pool2d_indices of the same kernel, stride, padding and dilation");
  }
  return str_cat("a device value check (kind ", r.check, ") failed: value ", v, ", bound ", n, ", extra ", r.extra);
}

}  // namespace

std::string device_check_message(const DeviceCheckReport& report, int device, const std::string& raised_at,
                                 bool later_failures) {
  return str_cat(cpu_text(report), "\n  note: found on cuda:", device,
                 " by a check that runs on the device without stopping the host, and raised at the host's next wait (",
                 raised_at, "); set MG_CUDA_SYNC=1 to raise it at the op that launched the check",
                 later_failures ? "\n  note: later index or target checks on this device failed too before this was "
                                  "raised (only the first is reported)"
                                : "");
}

bool take_dropped_flag(DeviceCheckReport* report) { return __atomic_exchange_n(&report->dropped, 0u, __ATOMIC_ACQ_REL) != 0; }

}  // namespace mg::cuda
