#include "mixgrad/amp/precision_plan.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "mixgrad/amp/initialize.h"
#include "mixgrad/ops/op.h"

namespace mg::amp {

namespace {
// A scale as the plan prints it: 65536, 1024, 0.5.
std::string format_scale(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
}  // namespace
namespace {

// The op that does a layer's arithmetic: its cast policy decides the dtype the layer runs in
// under autocast.
const char* main_op(const std::string& type) {
  static const std::map<std::string, const char*> ops = {
      {"Linear", "linear"},         {"Conv2d", "conv2d"},         {"ConvTranspose2d", "conv_transpose2d"},
      {"BatchNorm1d", "batch_norm"}, {"BatchNorm2d", "batch_norm"}, {"LayerNorm", "layer_norm"},
      {"GroupNorm", "group_norm"},   {"RMSNorm", "rms_norm"},       {"Embedding", "embedding"},
      {"MultiheadAttention", "linear"}};
  const auto it = ops.find(type);
  return it == ops.end() ? nullptr : it->second;
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(bytes < (1 << 20) ? 3 : 1) << double(bytes) / (1 << 20) << " MiB";
  return s.str();
}

}  // namespace

std::string precision_plan(const nn::Module& model, const optim::Optimizer* optimizer) {
  return precision_plan(model, is_initialized() ? properties() : opt_level_properties(OptLevel::O0), optimizer);
}

std::string precision_plan(const nn::Module& model, const Properties& p, const optim::Optimizer* optimizer) {
  // Masters by model tensor.
  std::unordered_map<const TensorImpl*, Tensor> master_of;
  if (optimizer) {
    for (const optim::MasterPair& m : optimizer->master_pairs()) master_of.emplace(m.model.impl(), m.master);
  }
  std::map<std::string, const nn::Module*> modules;
  for (const auto& [path, m] : model.named_modules()) modules[path] = m;

  // One row per module that owns parameters, in registration order.
  struct Row {
    std::string path, type, runs_in, stored, master;
    int64_t params = 0, bytes = 0;
  };
  std::vector<Row> rows;
  std::map<std::string, std::size_t> row_of;
  std::map<DType, int64_t> weight_bytes, grad_bytes;
  int64_t master_bytes = 0, total_params = 0, master_params = 0;
  const bool autocast = p.enabled && p.patch_functions;
  for (const auto& [name, t] : model.named_parameters()) {
    const std::size_t dot = name.rfind('.');
    const std::string path = dot == std::string::npos ? "" : name.substr(0, dot);
    auto [it, added] = row_of.emplace(path, rows.size());
    if (added) {
      Row r;
      r.path = path.empty() ? "(root)" : path;
      const nn::Module* m = modules.count(path) ? modules[path] : nullptr;
      r.type = m ? m->type_name() : "?";
      rows.push_back(r);
    }
    Row& r = rows[it->second];
    const auto master = master_of.find(t.impl());
    const int64_t bytes = t.numel() * int64_t(dtype_size(t.dtype()));
    r.params += t.numel();
    r.bytes += 2 * bytes;  // weight + gradient
    weight_bytes[t.dtype()] += bytes;
    grad_bytes[t.dtype()] += bytes;
    total_params += t.numel();
    const std::string stored = dtype_name(t.dtype());
    if (r.stored.find(stored) == std::string::npos) r.stored += (r.stored.empty() ? "" : "/") + stored;
    if (master != master_of.end()) {
      r.master = "f32 (optimizer)";
      r.bytes += 2 * master->second.numel() * 4;  // master + master gradient
      master_bytes += master->second.numel() * 4;
      master_params += master->second.numel();
    }
    if (r.runs_in.empty()) {
      const char* op = main_op(r.type);
      const bool bn = op && std::string(op) == "batch_norm";
      if (autocast && op) {
        const CastPolicy policy = op_policy(op_from_name(op));
        r.runs_in = policy == CastPolicy::Lower ? dtype_name(p.dtype)
                  : policy == CastPolicy::Fp32  ? "f32"
                  : bn                          ? "input dtype, f32 statistics"
                                                : std::string(dtype_name(t.dtype()));
      } else if (bn) {
        r.runs_in = t.dtype() == DType::F32 && p.cast_model_type && *p.cast_model_type != DType::F32
                        ? std::string(dtype_name(*p.cast_model_type)) + " in/out, f32 statistics"
                        : std::string(dtype_name(t.dtype())) + ", f32 statistics";
      } else {
        r.runs_in = dtype_name(t.dtype());
      }
    }
  }

  std::ostringstream s;
  s << "precision plan: " << model.type_name() << " at " << opt_level_name(p.opt_level)
    << (p.enabled ? "" : " (amp disabled)") << ", low-precision dtype " << dtype_name(p.dtype) << "\n";
  std::size_t w_path = 6, w_type = 4, w_runs = 7;
  for (const Row& r : rows) {
    w_path = std::max(w_path, r.path.size());
    w_type = std::max(w_type, r.type.size());
    w_runs = std::max(w_runs, r.runs_in.size());
  }
  s << std::left << "  " << std::setw(int(w_path)) << "module" << "  " << std::setw(int(w_type)) << "type" << "  "
    << std::setw(int(w_runs)) << "runs in" << "  " << std::setw(9) << "stored" << "  " << std::setw(15) << "master"
    << "  " << std::right << std::setw(10) << "params" << "  " << std::setw(12) << "memory" << "\n";
  for (const Row& r : rows) {
    s << std::left << "  " << std::setw(int(w_path)) << r.path << "  " << std::setw(int(w_type)) << r.type << "  "
      << std::setw(int(w_runs)) << r.runs_in << "  " << std::setw(9) << r.stored << "  " << std::setw(15)
      << (r.master.empty() ? "-" : r.master) << "  " << std::right << std::setw(10) << r.params << "  "
      << std::setw(12) << mib(r.bytes) << "\n";
  }
  auto by_dtype = [](const std::map<DType, int64_t>& m) {
    std::string out;
    int64_t total = 0;
    for (const auto& [dt, b] : m) {
      out += (out.empty() ? "" : ", ") + std::string(dtype_name(dt)) + " " + mib(b);
      total += b;
    }
    return mib(total) + (m.size() > 1 ? " (" + out + ")" : m.empty() ? "" : " (" + out + ")");
  };
  s << "  parameters      : " << total_params << "\n"
    << "  weights         : " << by_dtype(weight_bytes) << "\n"
    << "  gradients       : " << by_dtype(grad_bytes) << "\n"
    << "  master weights  : ";
  if (master_params) s << mib(2 * master_bytes) << " (f32 masters and their gradients, " << master_params << " values, in the optimizer)\n";
  else s << (p.master_weights ? "none yet (no optimizer given)\n" : "none\n");
  if (optimizer) {
    // What each parameter's state will hold once updated, from the optimizer itself (its buffers
    // follow its options, and Adafactor's are factored).
    int64_t params = 0, values = 0, bytes = 0, per = -2;  // per: buffers per parameter (-1: not uniform)
    bool all_f64 = true;
    for (const optim::ParamGroup& g : optimizer->param_groups()) {
      for (const Tensor& t : g.params) {
        const int64_t v = optimizer->planned_state_values(t, g.options);
        const int64_t k = optimizer->planned_buffers_like_parameter(t, g.options);
        per = per == -2 || per == k ? k : -1;
        params += t.numel();
        values += v;
        bytes += v * (t.dtype() == DType::F64 ? 8 : 4);
        all_f64 = all_f64 && t.dtype() == DType::F64;
      }
    }
    const char* state_dtype = all_f64 ? "f64" : "f32";  // f64 parameters keep f64 state
    s << "  optimizer state : " << mib(bytes) << " (" << optimizer->name() << ": ";
    if (per >= 0) {
      s << per << " " << state_dtype << " buffer" << (per == 1 ? "" : "s") << " per parameter)\n";
    } else {
      s << values << " " << state_dtype << " values for " << params << " parameters)\n";
    }
  }
  s << "  autocast        : " << (autocast ? std::string("on (") + dtype_name(p.dtype) + ") on the training thread" : "off")
    << "\n"
    << "  forward casts   : "
    << (p.enabled && p.cast_model_type && *p.cast_model_type != DType::F32
            ? std::string("inputs to ") + dtype_name(*p.cast_model_type) + ", outputs to " +
                  (p.cast_model_outputs ? dtype_name(*p.cast_model_outputs) : "unchanged")
            : std::string("none"))
    << "\n"
    << "  loss scale      : "
    << (p.loss_scale.dynamic
            // GradScaler's start: its default 2^16 clamped to [min_loss_scale, max_loss_scale]
            ? "dynamic (from " + format_scale(std::max(p.min_loss_scale.value_or(0.0),
                                                       std::min(p.max_loss_scale.value_or(65536.0), 65536.0))) +
                  ", x2 after 2000 clean steps, x0.5 on overflow)"
            : "static " + p.loss_scale.str())
    << "\n";
  return s.str();
}

}  // namespace mg::amp
