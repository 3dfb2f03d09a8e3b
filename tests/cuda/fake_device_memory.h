// FakeDeviceMemory: a DeviceMemory over host malloc with a capacity limit, counters, and events
// that complete only when a test says so (or at synchronize()), so the caching allocator's
// policy is tested on machines without a GPU. Misuse by the allocator (freeing an unknown
// pointer or event) throws std::logic_error, which fails the test.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/host/caching_allocator.h"

namespace mg::test {

class FakeDeviceMemory : public mg::cuda::DeviceMemory {
 public:
  explicit FakeDeviceMemory(std::size_t capacity = std::numeric_limits<std::size_t>::max())
      : capacity_(capacity) {}
  ~FakeDeviceMemory() override {
    for (auto& [p, bytes] : live_) std::free(p);
  }

  void* raw_alloc(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > capacity_ - used_) {
      ++failed_allocs_;
      return nullptr;
    }
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::logic_error("FakeDeviceMemory: host malloc failed");
    live_[p] = bytes;
    used_ += bytes;
    last_alloc_bytes_ = bytes;
    ++num_allocs_;
    return p;
  }
  void raw_free(void* p) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) throw std::logic_error("FakeDeviceMemory: raw_free of an unknown pointer");
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
    ++num_frees_;
  }
  mg::cuda::EventHandle record_event(mg::cuda::StreamId stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const mg::cuda::EventHandle e = next_event_++;
    events_[e] = Event{stream, false};
    ++events_recorded_;
    return e;
  }
  bool event_completed(mg::cuda::EventHandle e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return find_event(e).completed;
  }
  void destroy_event(mg::cuda::EventHandle e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    find_event(e);
    events_.erase(e);
  }
  void synchronize() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++sync_calls_;
    for (auto& [e, ev] : events_) ev.completed = true;
  }

  bool stream_is_capturing(mg::cuda::StreamId stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return joined_.count(stream) != 0;
  }
  // Test control: `stream` has joined a capture (a side stream waited on the capturing stream's
  // event), or left it.
  void set_stream_capturing(mg::cuda::StreamId stream, bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (on) joined_.insert(stream);
    else joined_.erase(stream);
  }

  // Test controls: the work queued on `stream` (or on every stream) has finished.
  void complete_events_on(mg::cuda::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [e, ev] : events_) {
      if (ev.stream == stream) ev.completed = true;
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
  std::size_t last_alloc_bytes() const { return locked([&] { return last_alloc_bytes_; }); }
  std::size_t events_recorded() const { return locked([&] { return events_recorded_; }); }
  std::size_t live_events() const { return locked([&] { return events_.size(); }); }
  std::size_t sync_calls() const { return locked([&] { return sync_calls_; }); }

 private:
  struct Event {
    mg::cuda::StreamId stream;
    bool completed;
  };
  Event& find_event(mg::cuda::EventHandle e) {
    auto it = events_.find(e);
    if (it == events_.end()) throw std::logic_error("FakeDeviceMemory: unknown event");
    return it->second;
  }
  template <typename F>
  std::size_t locked(F read) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return read();
  }

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t num_allocs_ = 0;
  std::size_t num_frees_ = 0;
  std::size_t failed_allocs_ = 0;
  std::size_t last_alloc_bytes_ = 0;
  std::map<mg::cuda::EventHandle, Event> events_;
  mg::cuda::EventHandle next_event_ = 1;
  std::size_t events_recorded_ = 0;
  std::size_t sync_calls_ = 0;
  std::set<mg::cuda::StreamId> joined_;  // side streams that joined a capture
};

// Runs f and returns the message of the mg::Error it throws ("" when it throws none).
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const mg::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mg::test
