#include "mixgrad/amp/autocast.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <mutex>
#include <utility>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/ops.h"

namespace mg::amp {
namespace {

// One cached cast of a weight: valid while the source is alive and keeps its storage and version
// and the grad mode matches (a cast made under NoGradGuard has no history and must not feed a
// backward). The source is held weakly: a live weak pointer also means the key's address was not
// reused by another tensor, and an entry whose weight died can be dropped.
struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  const void* data = nullptr;
  uint64_t version = 0;
  Tensor cast;
};
using CacheKey = std::tuple<const void*, DType, bool>;  // (tensor identity, target dtype, grad mode)

struct WeightCache {
  std::map<CacheKey, CacheEntry> entries;
  std::size_t swept_size = 0;  // the size after the last sweep of dead entries
};

WeightCache& weight_cache() {
  thread_local WeightCache cache;
  return cache;
}

bool cacheable(const Tensor& t) {
  // Never while this thread captures a CUDA graph: a cast served from the cache would not be
  // recorded (each replay would read the weights of the capture's time, from memory the cache may
  // free), and a cast made by the capture holds no values yet.
  return autocast_state(t.device().type).cache_enabled && t.dtype() == DType::F32 && t.is_leaf() && t.requires_grad() &&
         !t.impl()->is_view && !cuda::is_capturing();
}

// Drops the entries of weights that no longer exist, whenever the cache has doubled since the last
// sweep (amortised O(1) per insertion).
void sweep_dead_entries(WeightCache& cache) {
  if (cache.entries.size() < std::max<std::size_t>(64, 2 * cache.swept_size)) return;
  std::erase_if(cache.entries, [](const auto& kv) { return kv.second.source.expired(); });
  cache.swept_size = cache.entries.size();
}

Tensor cast_to(const Tensor& t, DType dtype) {
  if (!cacheable(t)) return to(t, dtype);
  const CacheKey key{t.impl(), dtype, GradMode::is_enabled()};
  WeightCache& cache = weight_cache();
  auto it = cache.entries.find(key);
  if (it != cache.entries.end() && !it->second.source.expired() && it->second.data == t.data_ptr() &&
      it->second.version == t.version()) {
    return it->second.cast;
  }
  Tensor c = to(t, dtype);
  cache.entries[key] = CacheEntry{t.impl_ptr(), t.data_ptr(), t.version(), c};
  sweep_dead_entries(cache);
  return c;
}

bool is_float(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

// The autocast hook: the one place where autocast happens (the dispatcher calls it with each op's
// policy, user-defined functions with theirs).
void autocast_hook(CastPolicy policy, const char* op, Tensors& inputs, DeviceType device) {
  const AutocastState& st = autocast_state(device);
  switch (policy) {
    case CastPolicy::Keep:
      return;
    case CastPolicy::Lower:
      // f64 is left alone, as in PyTorch: an explicit f64 computation is a deliberate choice.
      for (Tensor& t : inputs) {
        if (is_float(t) && t.dtype() != DType::F64 && t.dtype() != st.dtype) t = cast_to(t, st.dtype);
      }
      return;
    case CastPolicy::Banned:
      if (std::string_view(op) == "binary_cross_entropy") {
        MG_CHECK(st.dtype != DType::F16, DTypeError, op,
                 ": banned under f16 autocast: its inputs or result leave f16's range",
                 "\n  hint: use binary_cross_entropy_with_logits (it fuses the sigmoid and is safe under autocast), "
                 "or compute this op in an Autocast({.enabled = false}) region on f32 inputs");
      }
      MG_CHECK(st.dtype != DType::F16, DTypeError, op, ": banned under f16 autocast (set_policy made it so)",
               "\n  hint: compute this op in an Autocast({.enabled = false}) region on f32 inputs, or reset_policy(\"",
               op, "\")");
      [[fallthrough]];  // under bf16 (f32's range) it runs in f32
    case CastPolicy::Fp32:
      for (Tensor& t : inputs) {
        if (is_float(t) && (t.dtype() == DType::F16 || t.dtype() == DType::BF16)) t = to(t, DType::F32);
      }
      return;
    case CastPolicy::Promote: {
      bool any = false;
      DType widest = DType::F16;
      for (const Tensor& t : inputs) {
        if (!is_float(t)) continue;
        widest = any ? promote_types(widest, t.dtype()) : t.dtype();
        any = true;
      }
      for (Tensor& t : inputs) {
        if (is_float(t) && t.dtype() != widest) t = to(t, widest);
      }
      return;
    }
  }
}

}  // namespace

void install_autocast() {
  static std::once_flag once;
  std::call_once(once, [] { set_autocast_hook(autocast_hook); });
}

// One rule, kept by core (the state outside any region): bf16 on the CPU, f16 on CUDA.
DType default_autocast_dtype(DeviceType device) { return default_autocast_state(device).dtype; }

Autocast::Autocast(AutocastOptions o) : device_(o.device), saved_(autocast_state(o.device)) {
  // Unset: the current dtype where a region (or amp's O1) set one, as PyTorch reads
  // get_autocast_dtype; an O1 f16 run stays f16 inside library code that opens a plain region.
  const bool inherited = saved_.depth > 0 || saved_.enabled || saved_.dtype_from_region;
  const DType dtype = o.dtype.value_or(inherited ? saved_.dtype : default_autocast_dtype(o.device));
  MG_CHECK(dtype == DType::F16 || dtype == DType::BF16, DTypeError,
           "Autocast: dtype must be f16 or bf16, got ", dtype_name(dtype),
           "\n  hint: f32 everywhere is simply no Autocast region (or {.enabled = false})");
  install_autocast();
  AutocastState& st = autocast_state(o.device);
  st.enabled = o.enabled;
  st.dtype = dtype;
  st.cache_enabled = o.cache_enabled.value_or(saved_.depth > 0 ? saved_.cache_enabled : true);
  st.depth = saved_.depth + 1;
}

Autocast::~Autocast() {
  autocast_state(device_) = saved_;
  // Leaving the outermost region of every device type: drop every cached cast so nothing
  // outlives the regions.
  if (autocast_state(DeviceType::CPU).depth == 0 && autocast_state(DeviceType::CUDA).depth == 0) {
    clear_weight_cache();
  }
}

void clear_weight_cache() {
  WeightCache& cache = weight_cache();
  cache.entries.clear();
  cache.swept_size = 0;
}

bool is_autocast_enabled(DeviceType device) { return autocast_state(device).enabled; }
DType autocast_dtype(DeviceType device) { return autocast_state(device).dtype; }
std::size_t weight_cache_size() { return weight_cache().entries.size(); }

}  // namespace mg::amp
