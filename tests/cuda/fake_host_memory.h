// FakeHostMemory: a HostMemory (cuda/host/pinned_cache.h) over host malloc with a capacity limit,
// counters, and events that complete only when a test says so, so the pinned cache's policy is
// tested on machines without a GPU. Misuse by the cache (freeing an unknown pointer or event)
// throws std::logic_error, which fails the test.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "mixgrad/cuda/host/pinned_cache.h"

namespace mg::test {

class FakeHostMemory : public mg::cuda::HostMemory {
 public:
  explicit FakeHostMemory(std::size_t capacity = std::numeric_limits<std::size_t>::max())
      : capacity_(capacity) {}
  ~FakeHostMemory() override {
    for (auto& [p, bytes] : live_) std::free(p);
  }

  void* raw_alloc(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > capacity_ - used_) {
      ++failed_allocs_;
      return nullptr;
    }
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::logic_error("FakeHostMemory: host malloc failed");
    live_[p] = bytes;
    used_ += bytes;
    ++num_allocs_;
    return p;
  }
  void raw_free(void* p) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capturing_) throw std::logic_error("FakeHostMemory: cudaFreeHost during a CUDA graph capture");
    if (frees_until_failure_ > 0 && --frees_until_failure_ == 0) throw std::runtime_error("FakeHostMemory: injected free failure");
    auto it = live_.find(p);
    if (it == live_.end()) throw std::logic_error("FakeHostMemory: raw_free of an unknown pointer");
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
    ++num_frees_;
  }
  mg::cuda::EventHandle record_event(int device, mg::cuda::StreamId stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const mg::cuda::EventHandle e = next_event_++;
    events_[e] = Event{device, stream, false};
    ++events_recorded_;
    return e;
  }
  bool event_completed(mg::cuda::EventHandle e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capturing_) throw std::logic_error("FakeHostMemory: an event query during a CUDA graph capture");
    if (queries_until_failure_ > 0 && --queries_until_failure_ == 0) {
      throw std::runtime_error("FakeHostMemory: injected event query failure");
    }
    return find_event(e).completed;
  }
  bool can_query_events() override { return !locked([&] { return capturing_; }); }
  // Test control: the n-th event query from now throws std::runtime_error (as cudaEventQuery after
  // a sticky fault would).
  void fail_query_after(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    queries_until_failure_ = n;
  }
  // Test control: the n-th raw_free from now throws std::runtime_error (as a failing cudaFreeHost
  // would) and frees nothing.
  void fail_free_after(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    frees_until_failure_ = n;
  }
  // Test control: the calling code runs inside a CUDA graph capture (event queries and frees
  // refused, as cudaEventQuery and cudaFreeHost would invalidate the capture).
  void set_capturing(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = on;
  }
  void destroy_event(mg::cuda::EventHandle e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    find_event(e);
    events_.erase(e);
  }

  // Test controls: the work queued on `stream` of `device` (or everywhere) has finished.
  void complete_events_on(int device, mg::cuda::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [e, ev] : events_) {
      if (ev.device == device && ev.stream == stream) ev.completed = true;
    }
  }
  void complete_all_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [e, ev] : events_) ev.completed = true;
  }

  std::size_t used() const { return locked([&] { return used_; }); }
  std::size_t live_allocs() const { return locked([&] { return live_.size(); }); }
  std::size_t num_allocs() const { return locked([&] { return num_allocs_; }); }
  std::size_t num_frees() const { return locked([&] { return num_frees_; }); }
  std::size_t failed_allocs() const { return locked([&] { return failed_allocs_; }); }
  std::size_t events_recorded() const { return locked([&] { return events_recorded_; }); }
  std::size_t live_events() const { return locked([&] { return events_.size(); }); }

 private:
  bool capturing_ = false;
  int queries_until_failure_ = 0;
  struct Event {
    int device;
    mg::cuda::StreamId stream;
    bool completed;
  };
  Event& find_event(mg::cuda::EventHandle e) {
    auto it = events_.find(e);
    if (it == events_.end()) throw std::logic_error("FakeHostMemory: unknown event");
    return it->second;
  }
  template <typename F>
  std::size_t locked(F read) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return read();
  }

  mutable std::mutex mutex_;
  int frees_until_failure_ = 0;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t num_allocs_ = 0;
  std::size_t num_frees_ = 0;
  std::size_t failed_allocs_ = 0;
  std::map<mg::cuda::EventHandle, Event> events_;
  mg::cuda::EventHandle next_event_ = 1;
  std::size_t events_recorded_ = 0;
};

}  // namespace mg::test
