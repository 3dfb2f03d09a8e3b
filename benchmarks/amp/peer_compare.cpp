// bench_amp beside PyTorch: pairing, targets and the report (see peer_compare.h).
#include "benchmarks/amp/peer_compare.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "examples/common/format.h"
#include "examples/common/table.h"

namespace mg::bench {

namespace {

using example::format_fixed;
using nlohmann::json;

// The field `key` of `j` as T; a missing or mistyped field names itself.
template <typename T>
T field(const json& j, const char* key, const char* who) {
  MG_CHECK(j.contains(key), Error, "compare: a ", who, " record has no \"", key, "\" field\n  hint: was it written by ",
           who, "'s --json (bench_amp) or --worker (benchmarks/torch_amp_peer.py)?");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw Error(std::string("compare: the ") + who + " field \"" + key + "\" has the wrong type: " + e.what());
  }
}

template <typename T>
T field_or(const json& j, const char* key, T fallback) {
  return j.contains(key) && !j.at(key).is_null() ? j.at(key).get<T>() : fallback;
}

std::string ms(double s) { return format_fixed(1e3 * s, s < 0.01 ? 2 : 1); }
std::string spread(const Measurement& m) {
  return m.wall_median_s > 0 ? "±" + format_fixed(50 * (m.wall_max_s - m.wall_min_s) / m.wall_median_s, 1) + "%" : "-";
}
std::string mib(int64_t bytes) { return bytes < 0 ? "?" : format_fixed(double(bytes) / (1 << 20), 0); }
std::string syncs(double v) { return v < 0 ? "-" : format_fixed(v, v == double(int64_t(v)) ? 0 : 1); }
std::string rate(const Measurement& m) {
  return m.wall_median_s > 0 ? example::format_rate(double(m.batch) / m.wall_median_s) : "-";
}
bool o1_or_o2(const std::string& config) { return config.rfind("O1 ", 0) == 0 || config.rfind("O2 ", 0) == 0; }

// The best (lowest median) measurement per (model, config), with its round count, in first-seen order.
struct Best {
  Measurement m;
  int rounds = 0;
};
std::vector<std::pair<std::string, Best>> best_of(const std::vector<Measurement>& ms) {
  std::vector<std::pair<std::string, Best>> out;
  std::map<std::string, std::size_t> at;
  for (const Measurement& m : ms) {
    const std::string key = m.model + "\n" + m.config;
    const auto it = at.find(key);
    if (it == at.end()) {
      at[key] = out.size();
      out.push_back({key, {m, 1}});
    } else {
      Best& b = out[it->second].second;
      ++b.rounds;
      if (m.wall_median_s < b.m.wall_median_s) b.m = m;
    }
  }
  return out;
}

}  // namespace

Measurement parse_measurement(const std::string& line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw Error(std::string("compare: a line is not JSON: ") + e.what() + "\n  line: " + line.substr(0, 120));
  }
  Measurement m;
  const bool ours = j.contains("level");
  MG_CHECK(ours || j.contains("mode"), Error,
           "compare: a record has neither \"level\" (bench_amp) nor \"mode\" (the PyTorch peer)\n  line: ", line.substr(0, 120));
  const char* who = ours ? "bench_amp" : "PyTorch peer";
  m.framework = ours ? "mixgrad" : "pytorch";
  m.model = field<std::string>(j, "model", who);
  m.batch = field<int64_t>(j, "batch", who);
  m.unit = field_or<std::string>(j, "unit", "");
  m.wall_median_s = field<double>(j, "wall_median_s", who);
  m.wall_min_s = field_or<double>(j, "wall_min_s", m.wall_median_s);
  m.wall_max_s = field_or<double>(j, "wall_max_s", m.wall_median_s);
  MG_CHECK(m.wall_median_s > 0, Error, "compare: a ", who, " record of ", m.model, " has a step time of ",
           m.wall_median_s, " s; expected > 0");
  m.syncs_per_step = field_or<double>(j, "syncs_per_step", -1.0);
  m.loss_final = field_or<double>(j, "loss_final", 0.0);
  m.date = field_or<std::string>(j, "date", "");
  m.command = field_or<std::string>(j, "command", "");
  if (ours) {
    const std::string level = field<std::string>(j, "level", who);
    m.config = field_or<std::string>(j, "label", level + " " + field<std::string>(j, "dtype", who));
    const bool cuda = field_or<std::string>(j, "device", "cpu") == "cuda";
    m.peak_bytes = cuda ? field<int64_t>(j, "peak_tensor_bytes", who) : field_or<int64_t>(j, "peak_rss_bytes", -1);
    m.layout = field_or<std::string>(j, "layout", "-");
    m.version = field_or<std::string>(j, "commit", "");
    if (j.contains("machine")) {
      const json& mj = j["machine"];
      const std::string gpu = field_or<std::string>(mj, "gpu", "");
      m.device = cuda && !gpu.empty() ? gpu + " (" + field_or<std::string>(mj, "gpu_driver", "") + ")"
                                      : field_or<std::string>(mj, "processor", "");
    }
  } else {
    m.config = field<std::string>(j, "mode", who);
    m.peak_bytes = j.contains("peak_device_bytes") ? field<int64_t>(j, "peak_device_bytes", who)
                                                    : field_or<int64_t>(j, "peak_rss_bytes", -1);
    m.layout = field_or<std::string>(j, "memory_format", "-");
    m.version = "torch " + field_or<std::string>(j, "torch", "?");
    m.device = field_or<std::string>(j, "device_name", "");
  }
  return m;
}

std::vector<Measurement> read_measurements(const std::string& path) {
  MG_CHECK(!std::filesystem::is_directory(path), Error, "compare: '", path, "' is a directory, not a JSON lines file");
  std::ifstream f(path);
  MG_CHECK(bool(f), Error, "compare: cannot read '", path, "'");
  std::vector<Measurement> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(parse_measurement(line));
  }
  return out;
}

std::string peer_mode(const std::string& config) {
  if (config == "O0 f32") return "fp32";
  if (config == "O0 tf32") return "tf32";
  for (const char* d : {"f16", "bf16"}) {
    if (config == std::string("O1 ") + d || config == std::string("O2 ") + d) return std::string("autocast-") + d;
    if (config == std::string("O3 ") + d) return d;
  }
  throw Error("compare: no PyTorch mode pairs with '" + config + "'\n  hint: O0 f32, O0 tf32, O1/O2/O3 f16 or bf16");
}

std::vector<Comparison> compare_with_peer(const std::vector<Measurement>& ours, const std::vector<Measurement>& peer,
                                          const Targets& t) {
  const auto ours_best = best_of(ours);
  std::map<std::string, Best> peer_best;
  for (auto& [key, b] : best_of(peer)) peer_best.emplace(key, b);
  std::map<std::string, double> o0;  // model -> our O0 f32 median
  for (const auto& [key, b] : ours_best) {
    if (b.m.config == "O0 f32") o0[b.m.model] = b.m.wall_median_s;
  }
  std::vector<Comparison> rows;
  for (const auto& [key, b] : ours_best) {
    Comparison c;
    c.ours = b.m;
    c.ours_rounds = b.rounds;
    const std::string mode = peer_mode(b.m.config);
    const auto p = peer_best.find(b.m.model + "\n" + mode);
    if (p != peer_best.end() && p->second.m.batch != b.m.batch) {
      // Another batch (a smoke file beside a full one): step times that cannot be compared.
      c.missed.push_back("PyTorch's " + mode + " ran batch " + std::to_string(p->second.m.batch) + ", ours " +
                         std::to_string(b.m.batch) + ": not compared");
    } else if (p != peer_best.end()) {
      c.peer = p->second.m;
      c.peer_rounds = p->second.rounds;
      c.ratio = b.m.wall_median_s / p->second.m.wall_median_s;
      if (c.ratio > t.max_ratio) {
        c.missed.push_back("slower than PyTorch: " + format_fixed(c.ratio, 2) + "x its step time (target <= " +
                           format_fixed(t.max_ratio, 2) + "x)");
      }
    } else {
      c.missed.push_back("no PyTorch measurement of " + mode);
    }
    const auto r0 = o0.find(b.m.model);
    if (r0 != o0.end()) c.speedup_vs_o0 = r0->second / b.m.wall_median_s;
    if (o1_or_o2(b.m.config)) {
      if (c.speedup_vs_o0 >= 0 && c.speedup_vs_o0 < t.min_speedup) {
        c.missed.push_back(b.m.config.substr(0, 2) + " is " + format_fixed(c.speedup_vs_o0, 2) + "x our O0 f32 (target >= " +
                           format_fixed(t.min_speedup, 1) + "x)");
      }
      if (b.m.syncs_per_step > t.max_syncs) {
        c.missed.push_back(syncs(b.m.syncs_per_step) + " host synchronisations per step (target " + syncs(t.max_syncs) + ")");
      }
    }
    rows.push_back(std::move(c));
  }
  return rows;
}

std::vector<std::string> comparison_header() {
  return {"model", "mixgrad", "PyTorch", "ours ms", "spread", "PT ms", "PT spread", "ours/PT", "ours /s", "PT /s",
          "x O0 f32", "ours MiB", "PT MiB", "syncs ours", "syncs PT", "layout ours", "layout PT", "loss ours",
          "loss PT", "targets"};
}

std::vector<std::vector<std::string>> comparison_rows(const std::vector<Comparison>& rows) {
  std::vector<std::vector<std::string>> out;
  for (const Comparison& c : rows) {
    const Measurement& o = c.ours;
    const bool p = c.peer.has_value();
    out.push_back({o.model, o.config, p ? c.peer->config : peer_mode(o.config) + " (missing)", ms(o.wall_median_s),
                   spread(o), p ? ms(c.peer->wall_median_s) : "-", p ? spread(*c.peer) : "-",
                   c.ratio < 0 ? "-" : format_fixed(c.ratio, 2), rate(o), p ? rate(*c.peer) : "-",
                   c.speedup_vs_o0 < 0 ? "-" : format_fixed(c.speedup_vs_o0, 2) + "x", mib(o.peak_bytes),
                   p ? mib(c.peer->peak_bytes) : "-", syncs(o.syncs_per_step), p ? syncs(c.peer->syncs_per_step) : "-",
                   o.layout, p ? c.peer->layout : "-", format_fixed(o.loss_final, 4),
                   p ? format_fixed(c.peer->loss_final, 4) : "-", c.missed.empty() ? "met" : "missed"});
  }
  return out;
}

std::string format_comparison(const std::vector<Comparison>& rows) {
  std::vector<example::Column> cols;
  for (const std::string& h : comparison_header()) {
    cols.push_back({h, h == "model" || h == "mixgrad" || h == "PyTorch" || h.rfind("layout", 0) == 0 || h == "targets"
                           ? example::Align::Left
                           : example::Align::Right});
  }
  example::Table t(cols);
  for (auto& r : comparison_rows(rows)) t.add_row(r);
  std::ostringstream s;
  s << t.to_string();
  int missed = 0;
  for (const Comparison& c : rows) {
    for (const std::string& m : c.missed) {
      s << "missed: " << c.ours.model << " " << c.ours.config << ": " << m << "\n";
      ++missed;
    }
  }
  if (missed == 0) s << "every target met (ours <= PyTorch's step time; O1/O2 >= 2x our O0 f32 with no host sync)\n";
  return s.str();
}

void write_comparison_json(const std::string& path, const std::vector<Comparison>& rows) {
  std::ofstream out(path);
  MG_CHECK(bool(out), Error, "compare: cannot write the JSON file '", path, "'");
  auto side = [](const Measurement& m, int rounds) {
    return json{{"config", m.config}, {"batch", m.batch}, {"unit", m.unit}, {"wall_median_s", m.wall_median_s},
                {"wall_min_s", m.wall_min_s}, {"wall_max_s", m.wall_max_s},
                {"samples_per_s", double(m.batch) / m.wall_median_s}, {"peak_bytes", m.peak_bytes},
                {"syncs_per_step", m.syncs_per_step < 0 ? json(nullptr) : json(m.syncs_per_step)},
                {"loss_final", m.loss_final}, {"layout", m.layout}, {"device", m.device}, {"version", m.version},
                {"command", m.command}, {"rounds", rounds}};
  };
  for (const Comparison& c : rows) {
    json j = {{"model", c.ours.model}, {"mixgrad", side(c.ours, c.ours_rounds)},
              {"pytorch", c.peer ? side(*c.peer, c.peer_rounds) : json(nullptr)},
              {"ratio", c.ratio < 0 ? json(nullptr) : json(c.ratio)},
              {"speedup_vs_o0_f32", c.speedup_vs_o0 < 0 ? json(nullptr) : json(c.speedup_vs_o0)},
              {"targets_missed", c.missed}};
    out << j.dump() << "\n";
  }
  MG_CHECK(bool(out), Error, "compare: writing '", path, "' failed");
}

void append_comparison_markdown(const std::string& path, const std::vector<Comparison>& rows,
                                const std::vector<std::string>& notes) {
  std::ofstream out(path, std::ios::app);
  MG_CHECK(bool(out), Error, "compare: cannot append to '", path, "'");
  std::string date, device, commit, torch;
  std::vector<std::string> commands;
  std::set<std::string> seen;
  auto add_command = [&](const Measurement& m) {
    if (!m.command.empty() && seen.insert(m.command).second) commands.push_back(m.command);
  };
  for (const Comparison& c : rows) {
    if (date.empty()) date = c.ours.date;
    if (device.empty()) device = c.ours.device;
    if (commit.empty()) commit = c.ours.version;
    if (c.peer && torch.empty()) torch = c.peer->version;
    add_command(c.ours);
    if (c.peer) add_command(*c.peer);
  }
  out << "\n## bench_amp beside PyTorch, " << (date.empty() ? "(no date)" : date) << "\n\n"
      << "- device: " << (device.empty() ? "unknown" : device) << "\n"
      << "- commit: " << (commit.empty() ? "unknown" : commit) << "; " << (torch.empty() ? "no PyTorch figures" : torch) << "\n";
  for (const std::string& n : notes) {
    if (!n.empty()) out << "- " << n << "\n";
  }
  out << "- step time: the median of each configuration's timed steps (each side's best round); ours/PT < 1: "
         "mixgrad is faster; x O0 f32: our O0 f32 step time / this one's; syncs: host synchronisations per "
         "timed step; targets: ours <= 1.0x PyTorch, O1/O2 >= 2x our O0 f32 with 0 syncs\n";
  out << "- commands:\n";
  for (const std::string& c : commands) out << "  - `" << c << "`\n";
  const std::vector<std::string> header = comparison_header();
  out << "\n|";
  for (const std::string& h : header) out << " " << h << " |";
  out << "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) out << (i < 3 ? " --- |" : " ---: |");
  out << "\n";
  for (const auto& r : comparison_rows(rows)) {
    out << "|";
    for (const std::string& c : r) out << " " << c << " |";
    out << "\n";
  }
  for (const Comparison& c : rows) {
    for (const std::string& m : c.missed) out << "\n- missed: " << c.ours.model << " " << c.ours.config << ": " << m;
  }
  out << "\n";
  MG_CHECK(bool(out), Error, "compare: writing '", path, "' failed");
}

}  // namespace mg::bench
