// The table, JSON lines and Markdown of bench_amp (see report.h).
#include "benchmarks/amp/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "benchmarks/amp/op_recorder.h"
#include "core/error.h"
#include "examples/common/format.h"
#include "examples/common/table.h"

namespace mg::bench {

namespace {

using example::format_fixed;

std::string mib(int64_t bytes) { return bytes < 0 ? "?" : format_fixed(double(bytes) / (1 << 20), 0); }
std::string ms(double s) { return format_fixed(1e3 * s, s < 0.01 ? 2 : 1); }

// The O0 f32 result of each model (strict f32, not TF32), the reference of its other levels.
std::map<std::string, const RunResult*> o0_of(const std::vector<RunResult>& results) {
  std::map<std::string, const RunResult*> ref;
  for (const RunResult& r : results) {
    if (r.level == amp::OptLevel::O0 && !r.tf32) ref.emplace(r.model, &r);
  }
  return ref;
}

std::string syncs(const RunResult& r) {
  return r.syncs_per_step < 0 ? "-" : format_fixed(r.syncs_per_step, r.syncs_per_step == double(int64_t(r.syncs_per_step)) ? 0 : 1);
}

const char* format_name(MemoryFormat f) { return f == MemoryFormat::ChannelsLast ? "channels-last" : "contiguous"; }

}  // namespace

std::vector<std::string> report_header() {
  return {"model", "level", "step ms", "spread", "CPU ms", "samples/s", "O0 time /", "GFLOP/s", "peak RSS MiB",
          "tensors MiB", "loss@K", "O0 loss@K", "scale, skips", "syncs/step", "layout", "gemm/conv low"};
}

std::vector<std::vector<std::string>> report_rows(const std::vector<RunResult>& results) {
  const auto ref = o0_of(results);
  std::vector<std::vector<std::string>> rows;
  for (const RunResult& r : results) {
    const auto it = ref.find(r.model);
    const RunResult* o0 = it == ref.end() ? nullptr : it->second;
    const double spread = r.wall_median > 0 ? (r.wall_max - r.wall_min) / r.wall_median : 0;
    rows.push_back({r.model, r.label, ms(r.wall_median), "±" + format_fixed(50 * spread, 1) + "%", ms(r.cpu_median),
                    example::format_rate(r.samples_per_s),
                    o0 ? format_fixed(o0->wall_median / r.wall_median, 2) + "x" : "-", format_fixed(r.gflops, 1),
                    mib(r.peak_rss_bytes) + (r.rss_reset || r.peak_rss_bytes < 0 ? "" : "*"), mib(r.peak_tensor_bytes),
                    format_fixed(r.loss_final, 4) + " @" + std::to_string(r.loss_step), o0 ? format_fixed(o0->loss_final, 4) : "-",
                    example::format_number(r.loss_scale) + ", " + std::to_string(r.skipped_steps), syncs(r),
                    r.evidence.layout(), std::to_string(r.evidence.lower_ops_low) + "/" + std::to_string(r.evidence.lower_ops)});
  }
  return rows;
}

std::string format_table(const std::vector<RunResult>& results) {
  std::vector<example::Column> cols;
  for (const std::string& h : report_header()) {
    cols.push_back({h, h == "model" || h == "level" ? example::Align::Left : example::Align::Right});
  }
  example::Table t(cols);
  for (auto& row : report_rows(results)) t.add_row(row);
  return t.to_string();
}

std::string format_profiles(const std::vector<RunResult>& results, int top) {
  std::ostringstream s;
  for (const RunResult& r : results) {
    if (r.profile.empty()) continue;
    s << "\nprofile: " << r.model << " " << r.label << " (time from the previous op's end to this op's end, per step)\n";
    example::Table t({{"op"}, {"dir"}, {"calls", example::Align::Right}, {"ms", example::Align::Right},
                      {"share", example::Align::Right}});
    double rest = 0, rest_share = 0;
    int shown = 0;
    for (const ProfileEntry& e : r.profile) {
      if (shown++ < top) {
        t.add_row({e.op, is_phase_name(e.op) ? "" : e.backward ? "bwd" : "fwd", format_fixed(e.calls, 0), ms(e.seconds), format_fixed(100 * e.share, 1) + "%"});
      } else {
        rest += e.seconds;
        rest_share += e.share;
      }
    }
    if (shown > top) t.add_row({"(" + std::to_string(shown - top) + " other op types)", "", "", ms(rest), format_fixed(100 * rest_share, 1) + "%"});
    s << t.to_string();
  }
  return s.str();
}

void write_json_lines(const std::string& path, const std::vector<RunResult>& results, const Machine& m,
                      const std::string& command) {
  std::ofstream out(path);
  MG_CHECK(bool(out), Error, "cannot write the JSON file '", path, "'");
  const auto ref = o0_of(results);
  for (const RunResult& r : results) {
    nlohmann::json j = {{"model", r.model}, {"description", r.description}, {"level", amp::opt_level_name(r.level)},
                        {"dtype", dtype_name(r.dtype)}, {"tf32", r.tf32}, {"label", r.label},
                        {"batch", r.batch}, {"unit", r.unit}, {"device", r.cuda ? "cuda" : "cpu"},
                        {"timing", r.timing}, {"memory_format", format_name(r.memory_format)},
                        {"layout", r.evidence.layout()},
                        {"steps", r.wall_s.size()}, {"wall_s", r.wall_s}, {"cpu_s", r.cpu_s}, {"host_s", r.host_s},
                        {"loop_wall_s", r.loop_wall_s},
                        {"wall_median_s", r.wall_median}, {"wall_min_s", r.wall_min}, {"wall_max_s", r.wall_max},
                        {"cpu_median_s", r.cpu_median}, {"samples_per_s", r.samples_per_s},
                        {"forward_flops", r.forward_flops}, {"step_flops", r.step_flops}, {"gflops", r.gflops},
                        {"peak_rss_bytes", r.peak_rss_bytes}, {"peak_rss_reset", r.rss_reset},
                        {"peak_tensor_bytes", r.peak_tensor_bytes}, {"loss_first", r.loss_first},
                        {"loss_step", r.loss_step}, {"loss_final", r.loss_final}, {"loss_scale", r.loss_scale},
                        {"skipped_steps", r.skipped_steps},
                        {"evidence", {{"lower_ops", r.evidence.lower_ops}, {"lower_ops_low", r.evidence.lower_ops_low},
                                      {"low_ops", r.evidence.low_ops}, {"ops", r.evidence.ops},
                                      {"params", r.evidence.params}, {"params_low", r.evidence.params_low},
                                      {"master_weights", r.evidence.master_weights}, {"convs", r.evidence.convs},
                                      {"convs_channels_last", r.evidence.convs_channels_last}}},
                        {"machine", {{"processor", m.processor}, {"features", m.features()}, {"onednn_isa", m.onednn_isa},
                                     {"bf16_kernels", m.bf16_kernels}, {"threads", m.threads}, {"env", m.env},
                                     {"load_average", m.load_average},
                                     {"gpu", m.gpu}, {"gpu_driver", m.gpu_driver}}},
                        {"date", m.date_utc}, {"commit", m.commit}, {"command", command}};
    if (r.cuda) {
      j["syncs_per_step"] = r.syncs_per_step;  // absent on the CPU: nothing to count
      j["cudnn_benchmark"] = r.cudnn_benchmark;
    }
    const auto it = ref.find(r.model);
    if (it != ref.end()) {
      j["o0_wall_median_s"] = it->second->wall_median;
      j["o0_loss_final"] = it->second->loss_final;
    }
    if (!r.profile.empty()) {
      nlohmann::json p = nlohmann::json::array();
      for (const ProfileEntry& e : r.profile) {
        p.push_back({{"op", e.op}, {"backward", e.backward}, {"calls", e.calls}, {"seconds", e.seconds}, {"share", e.share}});
      }
      j["profile"] = p;
    }
    out << j.dump() << "\n";
  }
  MG_CHECK(bool(out), Error, "writing '", path, "' failed");
}

std::string shell_command(const std::vector<std::string>& args) {
  std::string s;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i) s += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789_@%+=:,./-") == std::string::npos;
    if (plain) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

std::string markdown_code(const std::string& text) {
  std::size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  // A space inside the fence when the text starts or ends with a backtick (CommonMark strips one).
  const bool pad = !text.empty() && (text.front() == '`' || text.back() == '`');
  return fence + (pad ? " " : "") + text + (pad ? " " : "") + fence;
}

void append_markdown(const std::string& path, const std::vector<RunResult>& results, const Machine& m,
                     const std::string& command, const std::string& note) {
  std::ofstream out(path, std::ios::app);
  MG_CHECK(bool(out), Error, "cannot append to '", path, "'");
  out << "\n## bench_amp, " << m.date_utc << "\n\n"
      << "- machine: " << m.processor << ", " << m.logical_cpus << " logical CPUs; " << m.features()
      << "; oneDNN ISA " << m.onednn_isa
      << (m.gpu.empty() ? "; bf16 kernels " + m.bf16_kernels : "; GPU " + m.gpu + " (" + m.gpu_driver + ")") << "\n"
      << "- threads: " << m.threads << "; environment: " << (m.env.empty() ? "(none of the OMP/oneDNN variables set)" : "")
      ;
  for (std::size_t i = 0; i < m.env.size(); ++i) out << (i ? ", " : "") << "`" << m.env[i] << "`";
  out << "; load average at start: " << m.load_average << "\n"
      << "- commit: " << m.commit << "\n"
      << "- command: " << markdown_code(command) << "\n";
  if (!note.empty()) out << "- note: " << note << "\n";
  out << "- step = zero_grad, forward, loss, scaled backward (unscale + inf/NaN check), optimizer step; "
         "step ms is the median of the timed steps (CUDA: between events around each step, no host wait inside "
         "the timed steps; syncs/step counts the host waits), spread ±half their range; loss@K is the loss of step K "
         "from the same seed and batch; gemm/conv low counts the matmul/linear/conv calls with f16/bf16 "
         "outputs in one forward\n\n";
  const std::vector<std::string> header = report_header();
  out << "|";
  for (const std::string& h : header) out << " " << h << " |";
  out << "\n|";
  for (const std::string& h : header) out << (h == "model" || h == "level" ? " --- |" : " ---: |");
  out << "\n";
  for (const auto& row : report_rows(results)) {
    out << "|";
    for (const std::string& c : row) out << " " << c << " |";
    out << "\n";
  }
  MG_CHECK(bool(out), Error, "writing '", path, "' failed");
}

}  // namespace mg::bench
