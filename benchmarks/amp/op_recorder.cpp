// The op observer behind bench_amp's level check and --profile (see op_recorder.h).
#include "benchmarks/amp/op_recorder.h"

#include <chrono>
#include <cstring>

#include "core/error.h"

namespace mg::bench {

namespace {

OpRecorder* g_recorder = nullptr;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_low(DType d) { return d == DType::F16 || d == DType::BF16; }
bool is_float(DType d) { return is_low(d) || d == DType::F32 || d == DType::F64; }

}  // namespace

double gemm_conv_flops(const OpEvent& e) {
  if (e.backward || e.inputs == nullptr || e.outputs == nullptr || e.outputs->empty() || e.inputs->size() < 2) return 0;
  const Tensor& out = (*e.outputs)[0];
  const Tensor& a = (*e.inputs)[0];
  const Tensor& b = (*e.inputs)[1];
  if (!out.defined() || !a.defined() || !b.defined() || a.shape().empty() || b.shape().empty()) return 0;
  const double n_out = double(out.numel());
  const char* op = e.op;
  if (std::strcmp(op, "linear") == 0 || std::strcmp(op, "matmul") == 0 || std::strcmp(op, "mm") == 0 ||
      std::strcmp(op, "bmm") == 0) {
    return 2.0 * n_out * double(a.shape().back());  // x [.., K] @ w^T [K, N] / a [.., M, K] @ b [.., K, N]
  }
  if (std::strcmp(op, "addmm") == 0 || std::strcmp(op, "baddbmm") == 0) {
    // (c, a, b): the reduced dimension is the last of a, the second input
    return 2.0 * n_out * double(b.shape().back());
  }
  if (std::strcmp(op, "attention") == 0 && e.inputs->size() >= 3 && b.dim() >= 2 && a.shape().back() > 0 &&
      out.shape().back() > 0) {
    // (q [.., Lq, E], k [.., Lk, E], v [.., Lk, Ev]) -> out [.., Lq, Ev]: q kᵀ and P v, each
    // 2 * (rows x Lk) * (E or Ev), as the composite's two matmuls counted
    const double rows = n_out / double(out.shape().back()), lk = double(b.shape()[b.dim() - 2]);
    return 2.0 * rows * lk * double(a.shape().back() + out.shape().back());
  }
  if (std::strcmp(op, "conv2d") == 0 && b.shape().size() == 4) {
    // w [Cout, Cin/g, kH, kW]: each output element reduces Cin/g * kH * kW products
    return 2.0 * n_out * double(b.numel() / b.shape()[0]);
  }
  return 0;
}

double gemm_conv_backward_flops(const OpEvent& e) {
  const double forward = gemm_conv_flops(e);
  if (forward == 0 || !(*e.outputs)[0].requires_grad()) return 0;
  const Tensors& in = *e.inputs;
  auto needs = [&](size_t i) { return i < in.size() && in[i].defined() && in[i].requires_grad() ? 1.0 : 0.0; };
  if (std::strcmp(e.op, "attention") == 0) {
    // q kᵀ (G1) and P v (G2): dq and dk cost G1 each, dv = Pᵀ dO costs G2, and dP = dO vᵀ (G2)
    // is needed by dq or dk.
    const Tensor& q = in[0];
    const Tensor& k = in[1];
    const double g1 = 2.0 * double(q.numel()) * double(k.shape()[k.dim() - 2]);
    const double g2 = forward - g1;
    const double qk = needs(0) + needs(1);
    return qk * g1 + needs(2) * g2 + (qk > 0 ? g2 : 0.0);
  }
  // One product per operand gradient, each as costly as the forward: (a, b) operands, or
  // (c, a, b) for addmm/baddbmm whose c gradient is a copy.
  const size_t first = std::strcmp(e.op, "addmm") == 0 || std::strcmp(e.op, "baddbmm") == 0 ? 1 : 0;
  return forward * (needs(first) + needs(first + 1));
}

OpRecorder::OpRecorder(OpRecorderOptions options) : options_(options), thread_(std::this_thread::get_id()) {
  MG_CHECK(g_recorder == nullptr, Error, "OpRecorder: another recorder is installed; one at a time");
  g_recorder = this;
  previous_ = set_op_observer(&OpRecorder::observe);
}

OpRecorder::~OpRecorder() {
  set_op_observer(previous_);
  g_recorder = nullptr;
}

void OpRecorder::observe(const OpEvent& event) {
  if (g_recorder != nullptr && std::this_thread::get_id() == g_recorder->thread_) g_recorder->record(event);
}

void OpRecorder::begin_step() {
  in_step_ = true;
  step_start_ = last_ = now_seconds();
}

void OpRecorder::end_step() {
  const double t = now_seconds();
  if (in_step_ && options_.timed) {
    stats_[{kBetweenOps, false}].seconds += t - last_;
    step_seconds_ += t - step_start_;
  }
  in_step_ = false;
  ++steps_;
}

void OpRecorder::phase(const std::string& name) {
  MG_CHECK(is_phase_name(name), Error, "OpRecorder::phase: a phase name is parenthesised, got \"", name, "\"");
  if (!options_.timed || !in_step_) return;
  const double t = now_seconds();
  OpStats& s = stats_[{name, false}];
  ++s.calls;
  s.seconds += t - last_;
  last_ = t;
}

void OpRecorder::clear() {
  stats_.clear();
  steps_ = 0;
  step_seconds_ = 0;
}

void OpRecorder::record(const OpEvent& e) {
  OpStats& s = stats_[{e.op, e.backward}];
  ++s.calls;
  if (e.outputs != nullptr) {
    for (const Tensor& t : *e.outputs) {
      if (!t.defined() || !is_float(t.dtype())) continue;
      if (is_low(t.dtype())) {
        ++s.low_outputs;
        if (s.low_dtype != DType::F32 && s.low_dtype != t.dtype()) ++s.mixed_low;
        s.low_dtype = t.dtype();
      } else {
        ++s.f32_outputs;
      }
      if (t.dim() == 4 && t.suggest_memory_format() == MemoryFormat::ChannelsLast) ++s.channels_last_outputs;
      break;  // the first floating output decides
    }
  }
  s.flops += gemm_conv_flops(e);
  s.backward_flops += gemm_conv_backward_flops(e);
  if (options_.timed && in_step_) {
    const double t = now_seconds();
    s.seconds += t - last_;
    last_ = t;
  }
}

}  // namespace mg::bench
