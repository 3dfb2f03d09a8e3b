// Running an example program from a test: its exit code and combined output, and its metrics
// file as parsed JSON records (steps and evaluations apart), with wall-clock fields removable so
// two runs can be compared exactly.
#pragma once
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `program args` through the shell with `env` ("NAME=value ...") prepended.
inline RunResult run_program(const std::string& program, const std::string& args, const std::string& env = "") {
  const std::string cmd = env + (env.empty() ? "" : " ") + "OMP_WAIT_POLICY=PASSIVE " + program + " " + args + " 2>&1";
  RunResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

struct Metrics {
  std::vector<nlohmann::json> all, steps, evals;  // evals: records whose kind is not "step"
};

inline Metrics read_metrics(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  Metrics m;
  std::string line;
  while (std::getline(f, line)) {
    INFO(line);
    const nlohmann::json j = nlohmann::json::parse(line);  // throws (fails the test) on bad JSON
    REQUIRE(j.is_object());
    m.all.push_back(j);
    (j.value("kind", "") == "step" ? m.steps : m.evals).push_back(j);
  }
  return m;
}

// The records with the fields that measure wall-clock time or memory removed.
inline std::vector<nlohmann::json> without_timing(std::vector<nlohmann::json> records) {
  for (nlohmann::json& r : records) {
    for (const char* k : {"step_time", "samples_per_s", "epoch_time", "peak_rss", "eval_time", "wall_time"}) r.erase(k);
  }
  return records;
}

// One run's metrics read every step (--read-metrics step) against the same run's read at logging
// points only (log): every record that is not a step record equal but for timing, its train loss
// within `loss_tolerance` (relative; 0: exactly); the step records at multiples of `log_every`
// equal but for `accuracy`, `predictions` and `skipped` (one step's against the interval's).
inline void require_same_metrics_across_reads(const Metrics& step, const Metrics& log, int64_t log_every,
                                              double loss_tolerance) {
  const std::vector<nlohmann::json> a = without_timing(step.evals), b = without_timing(log.evals);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].dump() << "\n" << b[i].dump());
    nlohmann::json x = a[i], y = b[i];
    if (x.contains("train_loss")) {
      const double u = x["train_loss"].get<double>(), v = y.at("train_loss").get<double>();
      CHECK(std::abs(u - v) <= loss_tolerance * std::abs(u));
      x.erase("train_loss");
      y.erase("train_loss");
    }
    CHECK(x == y);
  }
  auto at_multiples = [&](const std::vector<nlohmann::json>& records) {
    std::vector<nlohmann::json> out;
    for (nlohmann::json r : without_timing(records)) {
      if (r.at("step").get<int64_t>() % log_every != 0) continue;
      for (const char* k : {"accuracy", "predictions", "skipped"}) r.erase(k);
      out.push_back(r);
    }
    return out;
  };
  const std::vector<nlohmann::json> sa = at_multiples(step.steps), sb = at_multiples(log.steps);
  REQUIRE(!sa.empty());
  CHECK(sa == sb);
}

// Each step record read at logging points counts the predictions and right ones of the steps since
// the previous read (a multiple of `log_every` or an epoch's end, every `steps_per_epoch`), as the
// records of the same run read at every step (`every`) add up.
inline void require_interval_accuracies(const Metrics& every, const Metrics& log, int64_t log_every,
                                        int64_t steps_per_epoch) {
  std::vector<int64_t> predictions(1), correct(1);  // by step, from 1
  for (const nlohmann::json& r : every.steps) {
    const int64_t n = r.at("predictions").get<int64_t>();
    REQUIRE(r.at("step").get<int64_t>() == int64_t(predictions.size()));
    predictions.push_back(n);
    correct.push_back(std::llround(r.at("accuracy").get<double>() * double(n)));
  }
  int checked = 0;
  for (const nlohmann::json& r : log.steps) {
    const int64_t k = r.at("step").get<int64_t>();
    if (k % log_every != 0) continue;
    int64_t from = k - 1;
    while (from > 0 && from % log_every != 0 && from % steps_per_epoch != 0) --from;
    int64_t n = 0, right = 0;
    for (int64_t i = from + 1; i <= k; ++i) {
      n += predictions.at(std::size_t(i));
      right += correct.at(std::size_t(i));
    }
    INFO("step " << k << " (steps " << from + 1 << " to " << k << ")");
    CHECK(r.at("predictions").get<int64_t>() == n);
    CHECK(r.at("accuracy").get<double>() == double(right) / double(n));
    ++checked;
  }
  CHECK(checked > 0);
}

// Runs `program flags` (holding --log-every `log_every`) reading every step and reading at logging
// points (--read-metrics step / log), and once more reading and recording every step, its metrics
// into files starting with `prefix`; requires the same records (require_same_metrics_across_reads)
// and each logging point's interval accuracy (require_interval_accuracies).
inline void check_reads_agree(const std::string& program, const std::string& flags, int64_t log_every,
                              int64_t steps_per_epoch, double loss_tolerance, const std::string& prefix) {
  const RunResult step = run_program(program, flags + " --read-metrics step --metrics " + prefix + "s.jsonl");
  const RunResult log = run_program(program, flags + " --read-metrics log --metrics " + prefix + "l.jsonl");
  const RunResult every =
      run_program(program, flags + " --read-metrics step --log-every 1 --metrics " + prefix + "e.jsonl");
  INFO(step.output << "\n" << log.output);
  REQUIRE(step.exit_code == 0);
  REQUIRE(log.exit_code == 0);
  REQUIRE(every.exit_code == 0);
  const Metrics l = read_metrics(prefix + "l.jsonl");
  require_same_metrics_across_reads(read_metrics(prefix + "s.jsonl"), l, log_every, loss_tolerance);
  require_interval_accuracies(read_metrics(prefix + "e.jsonl"), l, log_every, steps_per_epoch);
}

inline double mean_of(const std::vector<nlohmann::json>& records, const char* key, std::size_t begin, std::size_t end) {
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += records.at(i).at(key).get<double>();
  return s / double(end - begin);
}

}  // namespace mg::test
