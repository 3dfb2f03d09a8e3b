// The overflow tracer's state lives here, behind one mutex: the observer is a plain function
// pointer and only one tracer exists at a time. Each event scans every floating output once on
// the raw bits (|x| ordering equals the ordering of the magnitude bits for IEEE formats, so one
// integer max reduction gives both "all finite?" and the largest |x|, with no conversion); inf/NaN
// counts and full ranges (signed min/max) are computed only when needed.
#include "mixgrad/amp/overflow_tracer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/op_observer.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"

namespace mg::amp {
namespace {

// ---- scanning -------------------------------------------------------------------------------

// Calls f(ptr, n, stride) for every innermost row of t (one call when t is dense), ptr typed U.
template <typename U, typename F>
void for_each_row(const Tensor& t, F&& f) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const U* base = static_cast<const U*>(t.data_ptr());
  if (t.is_contiguous()) {
    f(base, n, int64_t(1));
    return;
  }
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  const int64_t nd = int64_t(shape.size());
  const int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1];
  std::vector<int64_t> idx(std::size_t(nd > 1 ? nd - 1 : 0), 0);
  for (int64_t row = 0, rows = n / inner; row < rows; ++row) {
    int64_t off = 0;
    for (int64_t d = 0; d + 1 < nd; ++d) off += idx[d] * strides[d];
    f(base + off, inner, inner_stride);
    for (int64_t d = nd - 2; d >= 0; --d) {  // odometer over the outer dims
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

struct BitsScan {
  double max_abs = 0.0;  // largest finite |x|
  int64_t num_inf = 0;
  int64_t num_nan = 0;
  bool nonfinite() const { return num_inf + num_nan > 0; }
};

// The largest magnitude bits of a row (the sign bit cleared). As unsigned integers NaN > inf >
// every finite value, so this one reduction (vectorized; split over the worker threads for long
// rows) tells whether the row is finite and, if so, its largest |x|.
template <typename U>
U max_magnitude(const U* p, int64_t n, int64_t stride) {
  constexpr U kMagnitude = U(~U(0)) >> 1;
  auto serial = [&](int64_t b, int64_t e) {
    U m = 0;
    if (stride == 1) {
      for (int64_t i = b; i < e; ++i) m = std::max<U>(m, p[i] & kMagnitude);
    } else {
      for (int64_t i = b; i < e; ++i) m = std::max<U>(m, p[i * stride] & kMagnitude);
    }
    return m;
  };
  constexpr int64_t kGrain = 1 << 16;
  if (stride != 1 || n < 2 * kGrain) return serial(0, n);
  std::atomic<U> best{0};
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    const U m = serial(b, e);
    U cur = best.load(std::memory_order_relaxed);
    while (m > cur && !best.compare_exchange_weak(cur, m, std::memory_order_relaxed)) {
    }
  });
  return best.load();
}

// U: the unsigned integer of the format's width; kInf: the magnitude bits of inf.
template <typename U, U kInf, typename ToDouble>
BitsScan scan_bits(const Tensor& t, ToDouble to_double) {
  constexpr U kMagnitude = U(~U(0)) >> 1;
  U top = 0;
  for_each_row<U>(t, [&](const U* p, int64_t n, int64_t stride) { top = std::max(top, max_magnitude(p, n, stride)); });
  if (top < kInf) return {to_double(top), 0, 0};  // all finite: the common case, one pass
  // inf/NaN present: count them and find the largest finite |x| (a second pass, rare).
  U max_bits = 0;
  int64_t num_inf = 0, num_nan = 0;
  for_each_row<U>(t, [&](const U* p, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; ++i) {
      const U a = p[i * stride] & kMagnitude;
      num_inf += a == kInf;
      num_nan += a > kInf;
      max_bits = std::max<U>(max_bits, a < kInf ? a : U(0));
    }
  });
  return {to_double(max_bits), num_inf, num_nan};
}

// A CPU tensor to read (a copy for other devices, made without notifying the observer).
Tensor on_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  NoGradGuard no_grad;
  return to(t, Device::cpu());
}

BitsScan scan(const Tensor& t) {
  const Tensor h = on_host(t);
  switch (h.dtype()) {
    case DType::F16:
      return scan_bits<uint16_t, 0x7c00>(h, [](uint16_t b) { return double(f16_bits_to_f32(b)); });
    case DType::BF16:
      return scan_bits<uint16_t, 0x7f80>(h, [](uint16_t b) { return double(bf16_bits_to_f32(b)); });
    case DType::F32:
      return scan_bits<uint32_t, 0x7f800000u>(h, [](uint32_t b) { return double(std::bit_cast<float>(b)); });
    case DType::F64:
      return scan_bits<uint64_t, 0x7ff0000000000000ull>(h, [](uint64_t b) { return std::bit_cast<double>(b); });
    default:
      return {};
  }
}

bool floating_defined(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

double dtype_max(DType d) {
  switch (d) {
    case DType::F16: return 65504.0;
    case DType::BF16: return double(bf16_bits_to_f32(0x7f7f));
    case DType::F32: return double(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

TensorRange range_of(const Tensor& t) {
  TensorRange r;
  if (!t.defined()) return r;
  r.defined = true;
  r.dtype = t.dtype();
  r.shape = t.shape();
  r.numel = t.numel();
  if (!is_floating(t.dtype())) return r;
  const Tensor h = on_host(t);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  visit_floating(h.dtype(), "OverflowTracer", [&]<typename T>() {
    for_each_row<T>(h, [&](const T* p, int64_t n, int64_t stride) {
      for (int64_t i = 0; i < n; ++i) {
        const double v = double(p[i * stride]);
        if (std::isnan(v)) {
          ++r.num_nan;
        } else if (std::isinf(v)) {
          ++r.num_inf;
        } else {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
    });
  });
  if (r.num_finite() > 0) {
    r.min = lo;
    r.max = hi;
  }
  return r;
}

std::string where(const std::string& path) { return path.empty() ? "<top level>" : path; }

// ---- the one tracer's state ------------------------------------------------------------------

struct State {
  OverflowTracerOptions options;
  int64_t ops = 0;
  int64_t nonfinite = 0;
  std::optional<OverflowReport> first;
  std::vector<NearLimit> near;                       // in first-seen order
  std::unordered_map<std::string, std::size_t> near_index;  // key -> position in `near`
  // Deliberately infinite tensors: an attention mask's -inf written by masked_fill, and what is
  // computed from it alone (views, scores + mask). Held weakly, checked by identity.
  std::unordered_map<const TensorImpl*, std::weak_ptr<TensorImpl>> deliberate;
};

bool is_deliberate(const State& st, const Tensor& t) {
  const auto it = st.deliberate.find(t.impl());
  return it != st.deliberate.end() && it->second.lock().get() == t.impl();
}

void mark_deliberate(State& st, const Tensors& outputs) {
  for (const Tensor& t : outputs) {
    if (t.defined()) st.deliberate[t.impl()] = t.impl_ptr();
  }
}

std::mutex g_mutex;          // guards g_state and every tracer's access to it
State* g_state = nullptr;    // non-null while a tracer lives

OverflowReport make_report(const OpEvent& e, int64_t index, bool inputs_finite) {
  OverflowReport r;
  r.op = e.op;
  r.backward = e.backward;
  r.inplace = e.inplace;
  r.module_path = e.path();
  r.op_index = index;
  r.inputs_finite = inputs_finite;
  for (const Tensor& t : *e.inputs) r.inputs.push_back(range_of(t));
  for (const Tensor& t : *e.outputs) r.outputs.push_back(range_of(t));
  return r;
}

// Merges one event's largest |x| over its outputs of `dtype` (f16 or bf16) into the summary.
void note_near_limit(State& st, const OpEvent& e, DType dtype, double max_abs) {
  std::string key = str_cat(e.op, e.backward ? "|b|" : "|f|", dtype_name(dtype), '|', e.path());
  auto [it, inserted] = st.near_index.try_emplace(std::move(key), st.near.size());
  if (inserted) {
    st.near.push_back({.op = e.op, .backward = e.backward, .module_path = e.path(), .dtype = dtype});
  }
  NearLimit& n = st.near[it->second];
  n.max_abs = std::max(n.max_abs, max_abs);
  n.fraction = n.max_abs / dtype_max(dtype);
  ++n.count;
}

std::vector<NearLimit> top_near(const State& st) {
  std::vector<NearLimit> out = st.near;
  std::stable_sort(out.begin(), out.end(), [](const NearLimit& a, const NearLimit& b) { return a.fraction > b.fraction; });
  if (int64_t(out.size()) > std::max(st.options.top_k, 0)) out.resize(std::size_t(std::max(st.options.top_k, 0)));
  return out;
}

std::string format_report(const State& st) {
  std::ostringstream os;
  os << "OverflowTracer: " << st.ops << " ops observed, " << st.nonfinite
     << " with inf/NaN outputs (produced or propagated)\n";
  if (st.first) {
    os << (st.first->inputs_finite ? "first inf/NaN produced by " : "first inf/NaN seen in ") << st.first->str();
    if (!st.first->inputs_finite) {
      os << "  note: its inputs already held inf/NaN, so no observed op produced it: it came from the input\n"
            "  data, a parameter, or a gradient accumulated into .grad\n";
    }
  } else {
    os << "no op produced inf/NaN\n";
  }
  const std::vector<NearLimit> top = top_near(st);
  os << "closest to the f16/bf16 limits (top " << top.size() << " of " << st.near.size()
     << " ops with f16/bf16 outputs):\n";
  if (top.empty()) os << "  (none)\n";
  for (std::size_t i = 0; i < top.size(); ++i) {
    const NearLimit& n = top[i];
    os << "  " << i + 1 << ". " << n.op << " (" << (n.backward ? "backward" : "forward") << ") in "
       << where(n.module_path) << ": max |x| ";
    if (std::isinf(n.max_abs)) {
      os << "inf (overflowed " << dtype_name(n.dtype) << ", max " << dtype_max(n.dtype) << ")";
    } else {
      os << n.max_abs << " (" << 100.0 * n.fraction << "% of the " << dtype_name(n.dtype) << " max "
         << dtype_max(n.dtype) << ")";
    }
    if (n.count > 1) os << ", " << n.count << " calls";
    os << '\n';
  }
  return os.str();
}

// The observer: one event at a time (events from several threads are serialised).
void on_event(const OpEvent& e) {
  std::unique_lock lock(g_mutex);
  State* st = g_state;
  if (!st) return;
  if (e.view) {  // views only reinterpret their input's memory; a view of a mask is a mask
    if (!e.inputs->empty() && is_deliberate(*st, (*e.inputs)[0])) mark_deliberate(*st, *e.outputs);
    return;
  }
  OpObserverMute mute;  // copies made to read device tensors are not events
  const int64_t index = st->ops++;
  bool nonfinite = false;
  double max_f16 = -1.0, max_bf16 = -1.0;  // largest |x| over the f16 / bf16 outputs (-1: none)
  for (const Tensor& t : *e.outputs) {
    if (!floating_defined(t)) continue;
    const BitsScan s = scan(t);
    nonfinite = nonfinite || s.nonfinite();
    const double m = s.num_inf > 0 ? std::numeric_limits<double>::infinity() : s.max_abs;
    if (t.dtype() == DType::F16) max_f16 = std::max(max_f16, m);
    if (t.dtype() == DType::BF16) max_bf16 = std::max(max_bf16, m);
  }
  bool inputs_finite = true, nonfinite_inputs_deliberate = true;
  if (nonfinite) {
    for (const Tensor& t : *e.inputs) {
      if (!floating_defined(t) || !scan(t).nonfinite()) continue;
      inputs_finite = false;
      nonfinite_inputs_deliberate = nonfinite_inputs_deliberate && is_deliberate(*st, t);
    }
    // Deliberate infinities are not overflow: masked_fill writing ±inf into finite data (an
    // attention mask), and ops whose only non-finite inputs are such masks (scores + mask).
    const bool fills_mask = std::string_view(e.op) == "masked_fill" && inputs_finite;
    if (fills_mask || (!inputs_finite && nonfinite_inputs_deliberate)) {
      mark_deliberate(*st, *e.outputs);
      return;
    }
  }
  if (max_f16 >= 0) note_near_limit(*st, e, DType::F16, max_f16);
  if (max_bf16 >= 0) note_near_limit(*st, e, DType::BF16, max_bf16);
  if (!nonfinite) return;
  ++st->nonfinite;
  // Settled: a producer was found (or, without the input check, any first op).
  const bool had_first = st->first.has_value();
  if (had_first && (st->first->inputs_finite || !st->options.check_inputs_of_first)) return;
  // The first op that saw inf/NaN, replaced by the first that produced it from finite inputs.
  if (!had_first || inputs_finite) st->first = make_report(e, index, inputs_finite);
  if (st->options.stop_at_first && !had_first) {
    const std::string message = format_report(*st);
    lock.unlock();
    throw Error(message);
  }
}

}  // namespace

// ---- TensorRange / OverflowReport --------------------------------------------------------------

std::string TensorRange::str() const {
  if (!defined) return "undefined";
  std::ostringstream os;
  os << shape_str(shape) << ' ' << dtype_name(dtype);
  if (!is_floating(dtype)) return os.str();
  if (num_finite() > 0) {
    os << " min " << min << " max " << max;
  } else if (numel > 0) {
    os << " no finite values";
  }
  if (num_inf > 0) os << ", " << num_inf << " inf";
  if (num_nan > 0) os << ", " << num_nan << " NaN";
  if (num_inf + num_nan > 0) os << " (of " << numel << ")";
  return os.str();
}

std::string OverflowReport::str() const {
  std::ostringstream os;
  os << op << " (" << (backward ? "backward" : "forward") << (inplace ? ", in place" : "") << ") in module "
     << where(module_path) << ", op #" << op_index << '\n';
  os << (backward ? "  incoming gradients:\n" : "  inputs:\n");
  for (std::size_t i = 0; i < inputs.size(); ++i) os << "    [" << i << "] " << inputs[i].str() << '\n';
  os << (backward ? "  gradients produced:\n" : "  outputs:\n");
  for (std::size_t i = 0; i < outputs.size(); ++i) os << "    [" << i << "] " << outputs[i].str() << '\n';
  return os.str();
}

// ---- OverflowTracer ----------------------------------------------------------------------------

OverflowTracer::OverflowTracer(OverflowTracerOptions options) : options_(options) {
  MG_CHECK(options.top_k >= 0, Error, "OverflowTracer: top_k must be >= 0, got ", options.top_k);
  std::lock_guard lock(g_mutex);
  MG_CHECK(g_state == nullptr, Error, "OverflowTracer: another OverflowTracer is active; only one may trace at a time",
           "\n  hint: destroy the first tracer (leave its scope) before creating another, or reset() it");
  MG_CHECK(op_observer() == nullptr, Error, "OverflowTracer: another op observer is installed (set_op_observer)",
           "\n  hint: uninstall it with mg::set_op_observer(nullptr) first");
  g_state = new State{.options = options};
  set_op_observer(on_event);
}

OverflowTracer::~OverflowTracer() {
  std::lock_guard lock(g_mutex);
  set_op_observer(nullptr);
  delete g_state;
  g_state = nullptr;
}

bool OverflowTracer::found() const {
  std::lock_guard lock(g_mutex);
  return g_state->first.has_value();
}

std::optional<OverflowReport> OverflowTracer::first() const {
  std::lock_guard lock(g_mutex);
  return g_state->first;
}

std::vector<NearLimit> OverflowTracer::near_limits() const {
  std::lock_guard lock(g_mutex);
  return top_near(*g_state);
}

int64_t OverflowTracer::ops_observed() const {
  std::lock_guard lock(g_mutex);
  return g_state->ops;
}

int64_t OverflowTracer::nonfinite_ops() const {
  std::lock_guard lock(g_mutex);
  return g_state->nonfinite;
}

std::string OverflowTracer::report() const {
  std::lock_guard lock(g_mutex);
  return format_report(*g_state);
}

void OverflowTracer::reset() {
  std::lock_guard lock(g_mutex);
  *g_state = State{.options = options_};
}

}  // namespace mg::amp
