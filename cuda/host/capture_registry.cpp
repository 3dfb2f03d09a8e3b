// The capture registry's rules (see the header).
#include "mixgrad/cuda/host/capture_registry.h"

#include <algorithm>
#include <cstdio>

#include "mixgrad/core/error.h"

namespace mg::cuda {

namespace {
std::string stream_name(std::uintptr_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(s));
  return buf;
}
}  // namespace

void CaptureRegistry::begin(const Capture& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Capture& o : captures_) {
    MG_CHECK(o.thread != c.thread, Error, c.label, ": this thread is already capturing a CUDA graph (",
             o.label, " on cuda:", o.device, ", stream ", stream_name(o.stream),
             ")\n  hint: end that capture first; captures do not nest");
    MG_CHECK(!(o.device == c.device && o.stream == c.stream), Error, c.label, ": stream ", stream_name(c.stream),
             " of cuda:", c.device, " is already being captured by another thread (", o.label, ")");
  }
  captures_.push_back(c);
}

void CaptureRegistry::end(uint64_t thread) {
  std::lock_guard<std::mutex> lock(mutex_);
  captures_.erase(std::remove_if(captures_.begin(), captures_.end(), [&](const Capture& c) { return c.thread == thread; }),
                  captures_.end());
}

std::optional<CaptureRegistry::Capture> CaptureRegistry::of_thread(uint64_t thread) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Capture& c : captures_) {
    if (c.thread == thread) return c;
  }
  return std::nullopt;
}

bool CaptureRegistry::any() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !captures_.empty();
}

std::string CaptureRegistry::refusal(const std::string& what, HostWait kind, uint64_t thread, int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Capture* mine = nullptr;
  const Capture* on_device = nullptr;
  for (const Capture& c : captures_) {
    if (c.thread == thread) mine = &c;
    if (c.device == device && on_device == nullptr) on_device = &c;
  }
  if (mine != nullptr) {
    const std::string where = str_cat(mine->label, " is capturing a CUDA graph on this thread (cuda:", mine->device,
                                      ", stream ", stream_name(mine->stream), ")");
    if (kind == HostWait::HostCopy) {
      return str_cat(what, " during a CUDA graph capture: ", where,
                     ", and a copy between host memory and the device would be frozen into the graph (the same "
                     "host bytes at every replay)\n  hint: copy new inputs into the graph's static input tensors "
                     "before each replay, outside the captured step; the capture was abandoned");
    }
    return str_cat(what, " synchronises the host with the device, but ", where,
                   "; a captured step must not synchronise (nothing runs during a capture, so there is nothing "
                   "to wait for or read)\n  hint: read results (loss.item(), counters) after a replay, e.g. at "
                   "logging points; run the steps that must synchronise (cuDNN autotuning, first-step state "
                   "creation) eagerly before capturing; the capture was abandoned");
  }
  if (kind == HostWait::Device && on_device != nullptr) {
    return str_cat(what, " waits for all of cuda:", device, ", but another thread is capturing a CUDA graph there (",
                   on_device->label, ", stream ", stream_name(on_device->stream),
                   "): a captured stream never completes until the capture ends\n  hint: wait for a stream or an "
                   "event of your own instead, or synchronise after the capture");
  }
  return "";
}

}  // namespace mg::cuda
