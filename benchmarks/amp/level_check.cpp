// The "level did nothing" detector (see level_check.h).
#include "benchmarks/amp/level_check.h"

#include <sstream>

#include "ops/op.h"

namespace mg::bench {

namespace {

// Whether the op is a GEMM/conv by nature (its built-in policy is "lower"), and whether a
// set_policy override currently keeps it out of the low dtype.
struct LowerPolicy {
  bool builtin = false, overridden = false;
};
LowerPolicy lower_policy(const std::string& op) {
  try {
    const OpId id = op_from_name(op);
    const bool builtin = op_desc(id).default_policy == CastPolicy::Lower;
    return {builtin, builtin && op_policy(id) != CastPolicy::Lower};
  } catch (const Error&) {
    return {};  // a user-defined function, not in the op list
  }
}

}  // namespace

std::string LevelEvidence::str() const {
  std::ostringstream s;
  s << lower_ops_low << "/" << lower_ops << " gemm/conv in " << (low_dtype == DType::F32 ? "low" : dtype_name(low_dtype))
    << ", " << low_ops << "/" << ops << " ops low, " << params_low << "/" << params << " params low, masters "
    << (master_weights ? "yes" : "no");
  return s.str();
}

std::string LevelEvidence::layout() const {
  if (convs == 0) return "-";
  if (convs_channels_last == convs) return "NHWC";
  if (convs_channels_last == 0) return "NCHW";
  return "mixed " + std::to_string(convs_channels_last) + "/" + std::to_string(convs) + " NHWC";
}

LevelEvidence collect_evidence(const OpRecorder& recorder, const nn::Module& model, const optim::Optimizer& optimizer) {
  LevelEvidence ev;
  for (const auto& [key, s] : recorder.stats()) {
    if (key.backward || is_phase_name(key.op)) continue;
    ev.ops += s.calls;
    ev.low_ops += s.low_outputs;
    if (s.low_outputs > 0) {
      if (ev.low_dtype != DType::F32 && ev.low_dtype != s.low_dtype) ev.both_low_dtypes = true;
      ev.low_dtype = s.low_dtype;
    }
    if (s.mixed_low > 0) ev.both_low_dtypes = true;
    if (key.op == "conv2d") {
      ev.convs += s.calls;
      ev.convs_channels_last += s.channels_last_outputs;
    }
    const LowerPolicy lp = lower_policy(key.op);
    if (lp.builtin) {
      ev.lower_ops += s.calls;
      ev.lower_ops_low += s.low_outputs;
      if (lp.overridden) ev.lower_ops_overridden += s.calls;
    }
  }
  for (const Tensor& p : model.parameters()) {
    ++ev.params;
    if (p.dtype() == DType::F16 || p.dtype() == DType::BF16) ++ev.params_low;
  }
  ev.master_weights = optimizer.has_master_weights();
  return ev;
}

std::vector<std::string> level_problems(amp::OptLevel level, DType dtype, const LevelEvidence& ev) {
  std::vector<std::string> p;
  const std::string want = dtype_name(dtype);
  auto say = [&](auto&&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    p.push_back(s.str());
  };
  if (ev.ops == 0) {
    say("no op was recorded: the op observer saw nothing of the step");
    return p;
  }
  if (level == amp::OptLevel::O0) {
    if (ev.low_ops > 0) say(ev.low_ops, " ops produced ", dtype_name(ev.low_dtype), " outputs; O0 is all f32");
    if (ev.params_low > 0) say(ev.params_low, " parameters are low precision; O0 keeps them f32");
    if (ev.master_weights) say("the optimizer has master weights; O0 has none");
    return p;
  }
  if (ev.lower_ops == 0) {
    say("the step ran no GEMM or convolution (no op with the \"lower\" policy): nothing to check");
  } else if (ev.lower_ops_low == 0) {
    say("no GEMM/convolution ran in ", want, " (0 of ", ev.lower_ops, "): the level ran in f32");
  } else if (level == amp::OptLevel::O1 && ev.lower_ops_low < ev.lower_ops - ev.lower_ops_overridden) {
    say("only ", ev.lower_ops_low, " of ", ev.lower_ops - ev.lower_ops_overridden,
        " GEMM/convolution calls ran in ", want, "; autocast should cast every one not overridden by set_policy");
  } else if (level != amp::OptLevel::O1 && ev.lower_ops_low < ev.lower_ops) {
    // O2/O3 run no autocast (set_policy overrides do not apply): a GEMM/conv left in f32 means a
    // layer or the input was not cast.
    say("only ", ev.lower_ops_low, " of ", ev.lower_ops, " GEMM/convolution calls ran in ", want,
        "; the cast model should run every one in it");
  }
  if (ev.low_dtype != DType::F32 && ev.low_dtype != dtype) {
    say("ops produced ", dtype_name(ev.low_dtype), " but the level was asked for ", want);
  }
  if (ev.both_low_dtypes) say("ops produced both f16 and bf16 outputs; asked for ", want, " only");
  const bool cast_model = level == amp::OptLevel::O2 || level == amp::OptLevel::O3;
  if (cast_model && ev.params_low == 0) say("no parameter is ", want, ": the model was not cast");
  if (!cast_model && ev.params_low > 0) say(ev.params_low, " parameters are low precision; O1 keeps them f32");
  if (level == amp::OptLevel::O2 && !ev.master_weights) say("the optimizer has no f32 master weights; O2 needs them");
  if (level != amp::OptLevel::O2 && ev.master_weights) say("the optimizer has master weights; only O2 has them");
  return p;
}

void check_level(amp::OptLevel level, DType dtype, const LevelEvidence& ev, const std::string& what) {
  const std::vector<std::string> problems = level_problems(level, dtype, ev);
  if (problems.empty()) return;
  std::ostringstream s;
  s << "bench_amp: " << amp::opt_level_name(level);
  if (level != amp::OptLevel::O0) s << " " << dtype_name(dtype);
  if (!what.empty()) s << " (" << what << ")";
  s << " did not do what the level promises:";
  for (const std::string& line : problems) s << "\n  " << line;
  s << "\n  evidence: " << ev.str()
    << "\n  hint: the benchmark refuses to time a level that silently fell back; fix amp or the model first";
  throw LevelDidNothingError(s.str());
}

}  // namespace mg::bench
