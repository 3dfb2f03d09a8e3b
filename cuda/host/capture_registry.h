// Which threads are capturing a CUDA graph, and whether a call that would make the host wait for
// the device (or copy host memory into the stream) may run now. Plain host logic, tested on the
// CPU; the runtime (cuda/graph.cpp) keeps one registry per process and asks it before every
// synchronising call, so a captured step that synchronises fails with a message naming the call
// BEFORE CUDA sees it (CUDA would invalidate the capture, or worse, freeze a host value into it).
//
//   CaptureRegistry r;
//   r.begin({.thread = 1, .device = 0, .stream = s, .label = "StepGraph"});
//   r.refusal("Stream::synchronize", HostWait::Stream, /*thread=*/1, /*device=*/0);  // the error text
//
// Decision: captures run in cudaStreamCaptureModeThreadLocal, so only the capturing thread is
// restricted (DataLoader threads keep pinning memory and polling events meanwhile); the registry
// therefore refuses everything on the capturing thread, and on other threads only a wait for the
// whole device that holds a capture (it would wait for a stream that never runs).
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace mg::cuda {

// What kind of host wait (or host copy) a call is.
enum class HostWait {
  Stream,      // waits for one stream (cudaStreamSynchronize, an event, a blocking copy)
  Device,      // waits for the whole device (cudaDeviceSynchronize)
  HostCopy,    // copies between host memory and the device without waiting: frozen into a graph
};

class CaptureRegistry {
 public:
  struct Capture {
    uint64_t thread = 0;        // the capturing thread (a token: the runtime hashes std::thread::id)
    int device = 0;
    std::uintptr_t stream = 0;  // the capturing stream
    std::string label;          // what captures ("cuda::Graph", "StepGraph"), for messages
  };
  // Records a capture. Throws mg::Error when `c.thread` is already capturing (one at a time per
  // thread) or `c.stream` is already being captured.
  void begin(const Capture& c);
  // Forgets the capture of `thread` (no-op when there is none).
  void end(uint64_t thread);
  // The capture of `thread`, if any.
  std::optional<Capture> of_thread(uint64_t thread) const;
  bool any() const;

  // Empty when `what` may run on `thread` now; else the error message (what synchronised, that a
  // capture is in progress, and a hint).
  std::string refusal(const std::string& what, HostWait kind, uint64_t thread, int device) const;

 private:
  mutable std::mutex mutex_;
  std::vector<Capture> captures_;
};

}  // namespace mg::cuda
