// bench_amp as a program, in its smoke mode (tiny models, 1 warm-up and 2 timed steps): the
// table, the JSON lines and the Markdown are produced and parse, every model runs at every level
// and dtype, a level made to do nothing exits 3, and bad input gets clear errors.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cuda/cuda.h"
#include "ops/cpu/gemm.h"
#include "examples_smoke/smoke_util.h"

using mg::test::run_program;

namespace {

std::string temp_path(const std::string& name) { return "bench_amp_test_" + std::to_string(::getpid()) + "_" + name; }

}  // namespace

TEST_CASE("bench_amp --quick: every model at every level and dtype - table, JSON and Markdown", "[bench]") {
  const std::string json = temp_path("run.jsonl"), md = temp_path("run.md");
  std::remove(md.c_str());
  const auto r = run_program(MG_BENCH_AMP, "--quick --threads 2 --json " + json + " --markdown " + md);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The table's header (its column widths follow the widest model and level names).
  CHECK(std::regex_search(r.output, std::regex(R"(model +\| level +\| step ms +\| spread)")));
  CHECK(r.output.find("oneDNN ISA") != std::string::npos);
  // how bf16 GEMMs and convolutions run on this processor (native on AMX, else through f32)
  CHECK(r.output.find(mg::cpu::gemm_paths().bf16_native ? "bf16 kernels native" : "bf16 kernels via f32") !=
        std::string::npos);

  std::ifstream f(json);
  REQUIRE(f.good());
  std::set<std::string> seen;
  std::string line;
  while (std::getline(f, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    seen.insert(j["model"].get<std::string>() + " " + j["level"].get<std::string>() + " " + j["dtype"].get<std::string>());
    CHECK(j["steps"] == 2);
    CHECK(j["wall_s"].size() == 2);
    CHECK(j["wall_median_s"].get<double>() > 0);
    CHECK(j["cpu_median_s"].get<double>() > 0);
    CHECK(j["samples_per_s"].get<double>() > 0);
    CHECK(j["loss_step"] == 3);
    CHECK(std::isfinite(j["loss_final"].get<double>()));
    CHECK(j["peak_rss_bytes"].get<int64_t>() > 0);
    CHECK(j["forward_flops"].get<double>() > 0);
    CHECK(j["machine"]["threads"] == 2);
    CHECK(j["machine"]["bf16_kernels"] == (mg::cpu::gemm_paths().bf16_native ? "native" : "via f32"));
    CHECK(j["command"].get<std::string>().find("--quick") != std::string::npos);
    if (j["level"] != "O0") CHECK(j["evidence"]["lower_ops_low"].get<int64_t>() > 0);
    // The CPU's timing, no sync count (nothing to count), the layout that ran.
    CHECK(j["device"] == "cpu");
    CHECK(j["timing"] == "steady clock");
    CHECK(j["host_s"].size() == 2);
    CHECK(j["loop_wall_s"].get<double>() >= j["wall_s"][0].get<double>() + j["wall_s"][1].get<double>());
    CHECK_FALSE(j.contains("syncs_per_step"));
    CHECK(j["tf32"] == false);
    CHECK(j["label"] == j["level"].get<std::string>() + " " + j["dtype"].get<std::string>());
    CHECK(j["memory_format"] == "contiguous");
    CHECK(j["layout"] == (j["model"] == "resnet20" ? "NCHW" : "-"));
  }
  std::remove(json.c_str());
  std::set<std::string> want;
  for (const char* m : {"mlp", "resnet20", "bert-mini"}) {
    want.insert(std::string(m) + " O0 f32");
    for (const char* l : {"O1", "O2", "O3"}) {
      for (const char* d : {"f16", "bf16"}) want.insert(std::string(m) + " " + l + " " + d);
    }
  }
  CHECK(seen == want);

  std::ifstream mf(md);
  std::stringstream ms;
  ms << mf.rdbuf();
  std::remove(md.c_str());
  CHECK(ms.str().find("## bench_amp, ") != std::string::npos);
  CHECK(ms.str().find("- command: `") != std::string::npos);
  CHECK(ms.str().find("| bert-mini | O3 bf16 |") != std::string::npos);
  // The new columns: no sync count on the CPU, the conv layout.
  CHECK(std::regex_search(r.output, std::regex(R"(\| syncs/step +\| layout +\|)")));
  CHECK(std::regex_search(ms.str(), std::regex(R"(\| resnet20 \| O1 f16 \|.*\| - \| NCHW \|)")));
}

TEST_CASE("bench_amp --memory-format channels-last --batch: the convs run NHWC, the batch is the one given", "[bench]") {
  const std::string json = temp_path("cl.jsonl");
  const auto r = run_program(MG_BENCH_AMP, "--quick --threads 2 --models resnet20 --levels O0,O1 --dtypes bf16 "
                                           "--memory-format channels-last --batch 3 --json " + json);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream f(json);
  std::string line;
  int rows = 0;
  while (std::getline(f, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    CHECK(j["memory_format"] == "channels-last");
    CHECK(j["layout"] == "NHWC");
    CHECK(j["evidence"]["convs"].get<int64_t>() > 0);
    CHECK(j["evidence"]["convs_channels_last"] == j["evidence"]["convs"]);
    CHECK(j["batch"] == 3);
    ++rows;
  }
  std::remove(json.c_str());
  CHECK(rows == 2);
}

TEST_CASE("bench_amp --compare: its own JSON lines beside PyTorch's, ratios and targets", "[bench]") {
  const std::string ours = temp_path("ours.jsonl"), peer = temp_path("peer.jsonl"), md = temp_path("cmp.md"),
                    out = temp_path("cmp.jsonl");
  auto r = run_program(MG_BENCH_AMP, "--quick --threads 2 --models mlp --levels O0,O1 --dtypes bf16 --json " + ours);
  REQUIRE(r.exit_code == 0);
  // A PyTorch peer that took exactly twice our time at O0 and half at O1.
  {
    std::ifstream in(ours);
    std::ofstream p(peer);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      const bool o0 = j["level"] == "O0";
      const double t = j["wall_median_s"].get<double>() * (o0 ? 2.0 : 0.5);
      p << nlohmann::json{{"model", "mlp"}, {"mode", o0 ? "fp32" : "autocast-bf16"}, {"batch", j["batch"]},
                          {"wall_median_s", t}, {"peak_rss_bytes", 1 << 20}, {"torch", "2.11.0"}}.dump()
        << "\n";
    }
  }
  std::remove(md.c_str());
  r = run_program(MG_BENCH_AMP, "--compare " + ours + " --peer " + peer + " --markdown " + md + " --json " + out +
                                    " --note 'driver: test'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(std::regex_search(r.output, std::regex(R"(mlp +\| O0 f32 +\| fp32 .*\| +0\.50 \|)")));
  CHECK(std::regex_search(r.output, std::regex(R"(mlp +\| O1 bf16 +\| autocast-bf16 .*\| +2\.00 \|)")));
  CHECK(r.output.find("missed: mlp O1 bf16: slower than PyTorch: 2.00x") != std::string::npos);
  std::ifstream mf(md);
  std::stringstream m;
  m << mf.rdbuf();
  CHECK(m.str().find("## bench_amp beside PyTorch") != std::string::npos);
  CHECK(m.str().find("- driver: test") != std::string::npos);
  std::ifstream jf(out);
  std::string line;
  int rows = 0;
  while (std::getline(jf, line)) rows += nlohmann::json::parse(line).contains("ratio");
  CHECK(rows == 2);
  for (const std::string& p : {ours, peer, md, out}) std::remove(p.c_str());
}

TEST_CASE("bench_amp --profile: time per op type with its share of the step", "[bench]") {
  const auto r = run_program(MG_BENCH_AMP, "--quick --threads 2 --models mlp --levels O1 --dtypes bf16 --profile");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("profile: mlp O1 bf16") != std::string::npos);
  CHECK(r.output.find("linear") != std::string::npos);
  CHECK(r.output.find("share") != std::string::npos);
}

TEST_CASE("bench_amp: a level that did nothing exits 3 and says why", "[bench]") {
  const auto r = run_program(MG_BENCH_AMP, "--quick --threads 2 --models mlp --levels O1 --dtypes bf16 --policy linear=fp32");
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("bench_amp: O1 bf16 (mlp) did not do what the level promises") != std::string::npos);
  CHECK(r.output.find("no GEMM/convolution ran in bf16") != std::string::npos);
}

TEST_CASE("bench_amp: bad input gets a clear error", "[bench]") {
  auto r = run_program(MG_BENCH_AMP, "--models mlp,resnet21");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("unknown model 'resnet21'") != std::string::npos);
  r = run_program(MG_BENCH_AMP, "--dtypes f32");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--dtypes takes f16 and bf16") != std::string::npos);
  r = run_program(MG_BENCH_AMP, "--o0 tf32 --models mlp");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--o0 tf32 needs --device cuda") != std::string::npos);
  r = run_program(MG_BENCH_AMP, "--o0 f64 --models mlp");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--o0 takes f32 and tf32, got 'f64'") != std::string::npos);
  r = run_program(MG_BENCH_AMP, "--compare x.jsonl");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--compare needs --peer FILE") != std::string::npos);
  r = run_program(MG_BENCH_AMP, "--compare /nonexistent-dir/x.jsonl --peer y.jsonl");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("cannot read '/nonexistent-dir/x.jsonl'") != std::string::npos);
  // Every bad flag value is exit status 2, also those the library's parsers refuse (they were 1).
  for (const char* bad : {"--levels O4", "--dtypes foo", "--policy foo=fp32", "--policy linear=bogus"}) {
    INFO(bad);
    r = run_program(MG_BENCH_AMP, bad);
    CHECK(r.exit_code == 2);
  }
  r = run_program(MG_BENCH_AMP, "--levels O4");
  CHECK(r.output.find("O4") != std::string::npos);
  // The GPU-only models are refused on the CPU at full size, once, before anything runs.
  r = run_program(MG_BENCH_AMP, "--models mlp,resnet50 --levels O0");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--models resnet50 runs on a GPU only") != std::string::npos);
  CHECK(r.output.find("steps per configuration") == std::string::npos);
}

TEST_CASE("bench_amp --device cuda without a GPU: the framework's DeviceError", "[bench]") {
  if (mg::cuda::is_available()) return;  // a GPU machine runs it for real
  const auto r = run_program(MG_BENCH_AMP, "--quick --device cuda --models mlp");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(mg::cuda::unavailable_reason()) != std::string::npos);
}
