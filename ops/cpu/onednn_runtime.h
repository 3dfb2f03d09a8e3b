// What the oneDNN paths of the CPU kernels share (conv_onednn.cpp, onednn_matmul.cpp): the engine,
// a stream per calling thread, 64-byte aligned scratch buffers, primitives made with a user
// scratchpad, a small LRU of primitives, and oneDNN's errors as ours.
//
// The decision a reader must know: every primitive is created with scratchpad_mode::user and
// gets its scratchpad from the calling thread's buffer, and every thread has its own stream, so
// the same cached primitive may run on several threads at once (Debian's oneDNN is built without
// DNNL_ENABLE_CONCURRENT_EXEC, which its library-managed scratchpad would need).
//
//   static LruCache<Key, Plan, KeyHash> cache(128);
//   std::shared_ptr<const Plan> p = cache.get(key, [&] { return std::make_shared<Plan>(...); });
#pragma once
#include <cstddef>
#include <dnnl.hpp>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>

namespace mg::cpu::onednn {

const dnnl::engine& engine();
// The calling thread's stream (a stream is not meant to be shared between threads).
dnnl::stream& stream();
[[noreturn]] void rethrow(const dnnl::error& e, const char* what);
// Attributes with scratchpad_mode::user (the scratchpad is passed as DNNL_ARG_SCRATCHPAD).
dnnl::primitive_attr user_scratchpad();

// A 64-byte aligned buffer that grows on demand and keeps its storage across calls.
struct Buffer {
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], Free> p;
  std::size_t size = 0;
  void* get(std::size_t n) {
    if (n > size) {
      p.reset(static_cast<std::byte*>(::operator new[](n, std::align_val_t{64})));
      size = n;
    }
    return p.get();
  }
};

// A small LRU of shared values (plans, primitives): an evicted value stays valid while a caller
// still holds it. Thread-safe; `make` runs outside the lock (creating a primitive takes a while),
// so two threads may both make a missing value and the first one stored wins.
template <typename Key, typename Value, typename Hash>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) { engine(); }

  template <typename Make>
  std::shared_ptr<const Value> get(const Key& key, const Make& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        order_.splice(order_.begin(), order_, it->second.second);
        return it->second.first;
      }
    }
    std::shared_ptr<const Value> value = make();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second.first;
    order_.push_front(key);
    map_.emplace(key, std::make_pair(value, order_.begin()));
    if (map_.size() > capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return value;
  }

 private:
  std::size_t capacity_;
  std::mutex mu_;
  std::list<Key> order_;
  std::unordered_map<Key, std::pair<std::shared_ptr<const Value>, typename std::list<Key>::iterator>, Hash> map_;
};

// FNV-1a over an array of integers: the hash of the caches' keys.
struct ArrayHash {
  template <typename A>
  std::size_t operator()(const A& k) const {
    std::size_t h = 1469598103934665603ull;
    for (auto v : k) h = (h ^ std::size_t(v)) * 1099511628211ull;
    return h;
  }
};

}  // namespace mg::cpu::onednn
