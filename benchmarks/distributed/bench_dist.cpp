// bench_dist: data-parallel ResNet-20 training (Fashion-MNIST shapes, synthetic data, f32, SGD)
// from 1 to N processes on one machine — samples/s per rank and over all ranks, CPU time per step
// beside wall time, and the share of DDP's all-reduce hidden behind backward with the per-bucket
// timeline (bucket ready, all-reduce start and end, end of backward).
//
//   build/benchmarks/bench_dist [--quick] [--json FILE] [--rounds R] [--steps S] [--batch B]
//                               [--small-bucket-kib K] [--max-procs P] [--launcher PATH]
//
// Decision: bench_dist starts its own processes. Run plainly, it is the driver: for each
// configuration (1 process x 1 thread, 1 x 2, then P = 2 .. --max-procs processes x 1 thread
// with DDP's default 25 MiB bucket cap and with small buckets) it runs
// `mixgrad-run --nproc-per-node P --master-port 0 bench_dist --rank-run ...` (the launcher next to
// this program, build/launcher/mixgrad-run, or --launcher), each rank writing its numbers to a
// file (bench_dist_rank.h), and prints the table and the JSON lines. Rounds alternate the order
// of the configurations (forward, then backward) so the machine's load drifts over all of them;
// every number is the median over rounds. The weak-scaling setup of data parallelism: every rank
// keeps --batch examples per step, so the global batch grows with the processes. More processes
// than cores (4 on a 2-core machine) is a simulation of a larger run: the ranks time-share the
// cores, so samples/s cannot grow, but the bucket timeline still shows where each all-reduce runs
// relative to backward. The all-reduce bandwidth sweep itself is bench_allreduce_sweep.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_dist_rank.h"

extern char** environ;

namespace {

using nlohmann::json;

struct Options {
  bool quick = false;
  std::string json_path, launcher;
  int rounds = 2, steps = 10, warmup = 2, max_procs = 4;
  int64_t batch = 64, small_bucket_kib = 128;
};

struct Config {
  int procs = 1, threads = 1;
  int64_t bucket_kib = 25 * 1024;
  std::string name() const {
    std::string s = std::to_string(procs) + "p x " + std::to_string(threads) + "t";
    if (procs > 1) s += bucket_kib >= 1024 ? " " + std::to_string(bucket_kib / 1024) + " MiB" : " " + std::to_string(bucket_kib) + " KiB";
    return s;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double median_of(const json& a) { return median(a.get<std::vector<double>>()); }

// A table cell: the value printed with `format`, or "-" where it does not apply.
std::string cell(bool applies, const char* format, double value) {
  if (!applies) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string read_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown processor";
}

// Runs argv, waits, returns its exit status (128 + signal when killed, 127 when it cannot start).
int run_command(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What one run of a configuration measured, over its ranks.
struct RunResult {
  double rank_sps = 0, global_sps = 0, step_ms = 0, cpu_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double comm_ms = 0, hidden_share = 0, wait_ms = 0;
  int buckets = 0;
  json rank0;  // rank 0's raw numbers (its timelines)
};

RunResult summarise(const std::vector<json>& ranks) {
  RunResult r;
  double hidden = 0, comm = 0;
  const double w = double(ranks.size());
  for (const json& j : ranks) {
    const double sps = double(j["batch"].get<int64_t>()) * j["steps"].get<double>() / j["wall_s"].get<double>();
    r.global_sps += sps;
    r.rank_sps += sps / w;
    r.step_ms += median_of(j["step_ms"]) / w;
    r.cpu_ms += 1e3 * j["cpu_s"].get<double>() / j["steps"].get<double>() / w;
    r.forward_ms += median_of(j["forward_ms"]) / w;
    r.backward_ms += median_of(j["backward_ms"]) / w;
    r.optimizer_ms += median_of(j["optimizer_ms"]) / w;
    std::vector<double> comm_ms, wait_ms;
    for (const json& t : j["timelines"]) {
      hidden += t["hidden_ms"].get<double>();
      comm += t["comm_ms"].get<double>();
      comm_ms.push_back(t["comm_ms"].get<double>());
      wait_ms.push_back(t["reduced_ms"].get<double>() - t["backward_end_ms"].get<double>());
    }
    r.comm_ms += median(comm_ms) / w;
    r.wait_ms += median(wait_ms) / w;
    r.buckets = j["buckets"].get<int>();
  }
  r.hidden_share = comm > 0 ? hidden / comm : 0;
  r.rank0 = ranks.at(0);
  return r;
}

// Rank 0's bucket timeline, each field the median over the measured steps.
json median_timeline(const json& rank0) {
  const json& tl = rank0["timelines"];
  json out = {{"buckets", json::array()}};
  if (tl.empty()) return out;
  auto field = [&](const char* key) {
    std::vector<double> v;
    for (const json& t : tl) v.push_back(t[key].get<double>());
    return median(v);
  };
  out["first_hook_ms"] = field("first_hook_ms");
  out["backward_end_ms"] = field("backward_end_ms");
  out["reduced_ms"] = field("reduced_ms");
  const std::size_t nb = tl[0]["buckets"].size();
  for (std::size_t b = 0; b < nb; ++b) {
    std::vector<double> ready, start, end;
    int in_backward = 0;
    for (const json& t : tl) {
      const json& x = t["buckets"][b];
      ready.push_back(x["ready_ms"].get<double>());
      start.push_back(x["start_ms"].get<double>());
      end.push_back(x["end_ms"].get<double>());
      in_backward += x["in_backward"].get<bool>();
    }
    out["buckets"].push_back({{"bytes", tl[0]["buckets"][b]["bytes"]}, {"params", tl[0]["buckets"][b]["params"]},
                              {"ready_ms", median(ready)}, {"start_ms", median(start)}, {"end_ms", median(end)},
                              {"launched_in_backward", in_backward}, {"steps", tl.size()}});
  }
  return out;
}

void print_timeline(const Config& c, const json& t) {
  if (t["buckets"].empty()) return;
  std::printf("\n%s: rank 0's DDP timeline, median over the measured steps, ms since the first gradient hook "
              "(which came %.1f ms after backward() began):\n", c.name().c_str(), t["first_hook_ms"].get<double>());
  std::printf("  %6s %9s %6s %9s %9s %9s %8s %14s\n", "bucket", "KiB", "params", "ready", "ar_start", "ar_end",
              "hidden", "launched_in_bw");
  const double end_bw = t["backward_end_ms"].get<double>();
  int i = 0;
  for (const json& b : t["buckets"]) {
    const double s = b["start_ms"].get<double>(), e = b["end_ms"].get<double>();
    const double hidden = e > s ? std::clamp((std::min(e, end_bw) - s) / (e - s), 0.0, 1.0) : 0.0;
    std::printf("  %6d %9.1f %6d %9.1f %9.1f %9.1f %7.0f%% %9d of %d\n", i++, b["bytes"].get<double>() / 1024,
                b["params"].get<int>(), b["ready_ms"].get<double>(), s, e, 100 * hidden,
                b["launched_in_backward"].get<int>(), b["steps"].get<int>());
  }
  std::printf("  backward ended at %.1f ms; every bucket reduced and copied back at %.1f ms\n", end_bw,
              t["reduced_ms"].get<double>());
}

int parse(int argc, char** argv, Options& o, bench_dist::RankSpec& rank, bool& rank_mode) {
  auto next_int = [&](int& i) {
    if (i + 1 >= argc) throw std::runtime_error(std::string("missing value after ") + argv[i]);
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 1) throw std::runtime_error(std::string("expected a positive integer after ") + argv[i - 1]);
    return int64_t(v);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: bench_dist [--quick] [--json FILE] [--rounds R] [--steps S] [--batch B] [--small-bucket-kib K]\n"
          "                  [--max-procs P] [--launcher PATH]\n"
          "  --quick             batch 8, 2 steps, 1 round, 1p x 1t and 2p x 1t only (a smoke run)\n"
          "  --rounds R          runs of every configuration, alternating their order (default 2)\n"
          "  --steps S           measured steps per run, after 2 warm-up steps (default 10)\n"
          "  --batch B           examples per rank and step (default 64)\n"
          "  --small-bucket-kib  the small DDP bucket cap (default 128 KiB; ResNet-20 has 1.1 MB of gradients)\n"
          "  --max-procs P       the largest process count (default 4: a simulated run on a 2-core machine)\n"
          "  --launcher PATH     mixgrad-run (default: ../launcher/mixgrad-run next to this program)\n"
          "  --json FILE         also write one JSON object per configuration and per timeline\n");
      return 0;
    } else if (a == "--quick") o.quick = true;
    else if (a == "--json" && i + 1 < argc) o.json_path = argv[++i];
    else if (a == "--launcher" && i + 1 < argc) o.launcher = argv[++i];
    else if (a == "--rounds") o.rounds = int(next_int(i));
    else if (a == "--steps") o.steps = rank.steps = int(next_int(i));
    else if (a == "--batch") o.batch = rank.batch = next_int(i);
    else if (a == "--small-bucket-kib") o.small_bucket_kib = next_int(i);
    else if (a == "--max-procs") o.max_procs = int(next_int(i));
    // The rank's own flags (the driver passes them).
    else if (a == "--rank-run") rank_mode = true;
    else if (a == "--threads") rank.threads = int(next_int(i));
    else if (a == "--warmup") rank.warmup = int(next_int(i));
    else if (a == "--bucket-kib") rank.bucket_kib = next_int(i);
    else if (a == "--result" && i + 1 < argc) rank.result = argv[++i];
    else throw std::runtime_error("unknown or incomplete argument '" + a + "' (see --help)");
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench_dist::RankSpec rank;
  bool rank_mode = false;
  try {
    if (const int code = parse(argc, argv, o, rank, rank_mode); code >= 0) return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dist: %s\n", e.what());
    return 2;
  }
  if (rank_mode) return bench_dist::run_rank(rank);

  namespace fs = std::filesystem;
  const fs::path self = fs::read_symlink("/proc/self/exe");
  if (o.launcher.empty()) o.launcher = (self.parent_path().parent_path() / "launcher" / "mixgrad-run").string();
  if (!fs::exists(o.launcher)) {
    std::fprintf(stderr, "bench_dist: the launcher %s does not exist\n  hint: build mixgrad-run or pass --launcher PATH\n",
                 o.launcher.c_str());
    return 2;
  }
  if (o.quick) {
    o.batch = 8;
    o.steps = 2;
    o.warmup = 1;
    o.rounds = 1;
    o.max_procs = 2;
  }
  std::vector<Config> configs = {{1, 1}, {1, 2}};
  if (o.quick) configs = {{1, 1}};
  for (int p = 2; p <= o.max_procs; p *= 2) {
    if (!o.quick) configs.push_back({p, 1, 25 * 1024});
    configs.push_back({p, 1, o.small_bucket_kib});
  }
  char tmpl[] = "/tmp/bench_dist.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::fprintf(stderr, "bench_dist: cannot create a temporary folder\n");
    return 1;
  }
  const fs::path dir = tmpl;
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  const std::string machine = cpu_model() + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores online";
  const std::string load_start = read_line("/proc/loadavg");
  std::printf("bench_dist: ResNet-20 (CIFAR-style, 1x28x28 synthetic Fashion-MNIST-shaped data, f32, SGD momentum), "
              "%lld examples per rank and step, %d warm-up + %d measured steps per run, %d round(s) in alternating order\n",
              (long long)o.batch, o.warmup, o.steps, o.rounds);
  std::printf("machine: %s; OMP_WAIT_POLICY=%s; load average at start: %s\n", machine.c_str(),
              wait_policy ? wait_policy : "(unset)", load_start.c_str());
  std::printf("processes started by %s --nproc-per-node P --master-port 0 (Gloo on loopback); DDP bucket caps: "
              "25 MiB (the default) and %lld KiB\n", o.launcher.c_str(), (long long)o.small_bucket_kib);

  std::vector<std::vector<RunResult>> results(configs.size());
  for (int round = 0; round < o.rounds; ++round) {
    for (std::size_t k = 0; k < configs.size(); ++k) {
      const std::size_t ci = round % 2 == 0 ? k : configs.size() - 1 - k;
      const Config& c = configs[ci];
      const std::string prefix = (dir / ("c" + std::to_string(ci) + "r" + std::to_string(round))).string();
      const int status = run_command({o.launcher, "--nproc-per-node", std::to_string(c.procs), "--master-port", "0",
                                      self.string(), "--rank-run", "--threads", std::to_string(c.threads), "--batch",
                                      std::to_string(o.batch), "--steps", std::to_string(o.steps), "--warmup",
                                      std::to_string(o.warmup), "--bucket-kib", std::to_string(c.bucket_kib), "--result",
                                      prefix});
      if (status != 0) {
        std::fprintf(stderr, "bench_dist: the run of %s exited with status %d\n", c.name().c_str(), status);
        fs::remove_all(dir);
        return 1;
      }
      std::vector<json> ranks;
      for (int r = 0; r < c.procs; ++r) {
        std::ifstream f(prefix + ".rank" + std::to_string(r) + ".json");
        ranks.push_back(json::parse(f));  // a missing or broken file throws: the program fails
      }
      results[ci].push_back(summarise(ranks));
    }
  }
  fs::remove_all(dir);

  const std::string load_end = read_line("/proc/loadavg");
  std::printf("\n%-18s %6s %10s %10s %10s %9s %9s %9s %9s %9s %9s %8s %9s\n", "config", "global", "samples/s", "samples/s",
              "step_ms", "cpu_ms", "samples/", "fwd_ms", "bwd_ms", "opt_ms", "comm_ms", "hidden", "wait_ms");
  std::printf("%-18s %6s %10s %10s %10s %9s %9s %9s %9s %9s %9s %8s %9s\n", "", "batch", "per rank", "global", "(wall)",
              "per step", "CPU-s", "", "", "", "", "", "");
  std::vector<json> lines;
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    const std::vector<RunResult>& rs = results[ci];
    auto med = [&](double RunResult::*f) {
      std::vector<double> v;
      for (const RunResult& r : rs) v.push_back(r.*f);
      return median(v);
    };
    std::vector<double> per_round;
    for (const RunResult& r : rs) per_round.push_back(r.global_sps);
    const bool ddp = c.procs > 1;
    const double per_cpu_s = 1e3 * double(o.batch) / med(&RunResult::cpu_ms);
    std::printf("%-18s %6lld %10.1f %10.1f %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9s %8s %9s\n", c.name().c_str(),
                (long long)(o.batch * c.procs), med(&RunResult::rank_sps), med(&RunResult::global_sps),
                med(&RunResult::step_ms), med(&RunResult::cpu_ms), per_cpu_s, med(&RunResult::forward_ms),
                med(&RunResult::backward_ms), med(&RunResult::optimizer_ms),
                cell(ddp, "%.1f", med(&RunResult::comm_ms)).c_str(),
                cell(ddp, "%.0f%%", 100 * med(&RunResult::hidden_share)).c_str(),
                cell(ddp, "%.1f", med(&RunResult::wait_ms)).c_str());
    lines.push_back({{"bench", "bench_dist"}, {"config", c.name()}, {"processes", c.procs}, {"threads", c.threads},
                     {"batch_per_rank", o.batch}, {"global_batch", o.batch * c.procs},
                     {"bucket_kib", ddp ? json(c.bucket_kib) : json()}, {"buckets", rs.back().buckets},
                     {"steps", o.steps}, {"rounds", o.rounds}, {"samples_per_s_rank", med(&RunResult::rank_sps)},
                     {"samples_per_s_global", med(&RunResult::global_sps)}, {"samples_per_s_global_per_round", per_round},
                     {"step_ms", med(&RunResult::step_ms)}, {"cpu_ms_per_step", med(&RunResult::cpu_ms)},
                     {"samples_per_cpu_s_rank", per_cpu_s},
                     {"forward_ms", med(&RunResult::forward_ms)}, {"backward_ms", med(&RunResult::backward_ms)},
                     {"optimizer_ms", med(&RunResult::optimizer_ms)},
                     {"comm_ms", ddp ? json(med(&RunResult::comm_ms)) : json()},
                     {"hidden_share", ddp ? json(med(&RunResult::hidden_share)) : json()},
                     {"exposed_wait_ms", ddp ? json(med(&RunResult::wait_ms)) : json()}, {"machine", machine},
                     {"load_start", load_start}, {"load_end", load_end}});
  }
  std::printf("samples/s per rank: its examples over its measured wall time; global: the sum over ranks. cpu_ms: the "
              "process's CPU time per step (all its threads), the mean over ranks; wall and CPU apart show waiting; "
              "samples/CPU-s: a rank's examples per second of its CPU time (what it would do on a core of its own).\n"
              "comm_ms: the bucket all-reduces' time per step; hidden: the share of it that ran before backward ended; "
              "wait_ms: from the end of backward until every bucket was reduced (exposed communication).\n");
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    if (configs[ci].procs == 1) continue;
    json t = median_timeline(results[ci].back().rank0);
    print_timeline(configs[ci], t);
    lines.push_back({{"bench", "bench_dist"}, {"config", configs[ci].name()}, {"timeline", t}});
  }
  std::printf("\nload average at end: %s\n", load_end.c_str());
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    for (const json& j : lines) f << j.dump() << "\n";
    if (!f) {
      std::fprintf(stderr, "bench_dist: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    std::printf("JSON lines written to %s\n", o.json_path.c_str());
  }
  return 0;
}
