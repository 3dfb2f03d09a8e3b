// bench_amp's report: the table's O0 ratio and loss columns, the JSON lines (parsed back with
// nlohmann::json) and the Markdown section, from hand-made results.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "benchmarks/amp/machine.h"
#include "benchmarks/amp/report.h"

using mg::amp::OptLevel;
using mg::bench::RunResult;

namespace {

RunResult result(OptLevel level, mg::DType dtype, double median_s, double loss) {
  RunResult r;
  r.model = "mlp";
  r.description = "MLP";
  r.unit = "img";
  r.batch = 256;
  r.level = level;
  r.dtype = dtype;
  r.label = std::string(mg::amp::opt_level_name(level)) + " " + mg::dtype_name(dtype);
  r.wall_s = {median_s * 0.9, median_s, median_s * 1.1};
  r.cpu_s = {median_s, median_s, median_s};
  r.wall_median = median_s, r.wall_min = median_s * 0.9, r.wall_max = median_s * 1.1, r.cpu_median = median_s;
  r.samples_per_s = 256 / median_s;
  r.loss_step = 13;
  r.loss_final = loss;
  r.peak_rss_bytes = 300 << 20;
  r.rss_reset = true;
  r.evidence.lower_ops = 3;
  r.evidence.lower_ops_low = level == OptLevel::O0 ? 0 : 3;
  return r;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("report: the table puts each level beside its model's O0", "[bench]") {
  const std::vector<RunResult> rs = {result(OptLevel::O0, mg::DType::F32, 0.020, 2.5),
                                     result(OptLevel::O1, mg::DType::BF16, 0.010, 2.4)};
  const auto rows = mg::bench::report_rows(rs);
  const auto header = mg::bench::report_header();
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[1].size() == header.size());
  auto col = [&](const std::string& name) {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return i;
    }
    FAIL("no column " << name);
    return std::size_t(0);
  };
  CHECK(rows[1][col("level")] == "O1 bf16");
  CHECK(rows[1][col("step ms")] == "10.0");
  CHECK(rows[1][col("spread")] == "±10.0%");
  CHECK(rows[1][col("O0 time /")] == "2.00x");
  CHECK(rows[0][col("O0 time /")] == "1.00x");
  CHECK(rows[1][col("loss@K")] == "2.4000 @13");
  CHECK(rows[1][col("O0 loss@K")] == "2.5000");
  CHECK(rows[1][col("peak RSS MiB")] == "300");
  CHECK(rows[1][col("gemm/conv low")] == "3/3");
  const std::string table = mg::bench::format_table(rs);
  CHECK(table.find("O1 bf16") != std::string::npos);
}

TEST_CASE("report: JSON lines parse and carry the machine and the O0 reference", "[bench]") {
  const std::vector<RunResult> rs = {result(OptLevel::O0, mg::DType::F32, 0.020, 2.5),
                                     result(OptLevel::O3, mg::DType::F16, 0.015, 2.6)};
  mg::bench::Machine m;
  m.processor = "Test CPU";
  m.threads = 1;
  m.commit = "abc1234";
  const std::string path = "test_report_" + std::to_string(::getpid()) + ".jsonl";
  mg::bench::write_json_lines(path, rs, m, "bench_amp --x");
  std::ifstream f(path);
  std::string line;
  std::vector<nlohmann::json> js;
  while (std::getline(f, line)) js.push_back(nlohmann::json::parse(line));
  std::remove(path.c_str());
  REQUIRE(js.size() == 2);
  CHECK(js[1]["level"] == "O3");
  CHECK(js[1]["dtype"] == "f16");
  CHECK(js[1]["wall_s"].size() == 3);
  CHECK(js[1]["o0_wall_median_s"].get<double>() == 0.020);
  CHECK(js[1]["o0_loss_final"].get<double>() == 2.5);
  CHECK(js[1]["machine"]["processor"] == "Test CPU");
  CHECK(js[1]["commit"] == "abc1234");
  CHECK(js[1]["command"] == "bench_amp --x");
  CHECK_THROWS_WITH(mg::bench::write_json_lines("/nonexistent-dir/x.jsonl", rs, m, ""), Catch::Contains("cannot write"));
}

TEST_CASE("report: the Markdown section says machine, commit and command, one table row per result", "[bench]") {
  const std::vector<RunResult> rs = {result(OptLevel::O0, mg::DType::F32, 0.020, 2.5),
                                     result(OptLevel::O2, mg::DType::BF16, 0.012, 2.5)};
  mg::bench::Machine m;
  m.processor = "Test CPU";
  m.onednn_isa = "avx512_core_amx";
  m.bf16_kernels = "native";
  m.amx_bf16 = true;
  m.date_utc = "2026-12-01 23:59 UTC";
  m.commit = "abc1234";
  const std::string path = "test_report_" + std::to_string(::getpid()) + ".md";
  std::remove(path.c_str());
  mg::bench::append_markdown(path, rs, m, "bench_amp --threads 1", "shared machine");
  mg::bench::append_markdown(path, rs, m, "bench_amp --threads 1", "");  // appends, never overwrites
  const std::string md = read_all(path);
  std::remove(path.c_str());
  CHECK(md.find("## bench_amp, 2026-12-01 23:59 UTC") != std::string::npos);
  CHECK(md.find("AMX-BF16") != std::string::npos);
  CHECK(md.find("oneDNN ISA avx512_core_amx") != std::string::npos);
  CHECK(md.find("bf16 kernels native") != std::string::npos);
  // the CPU's bf16 path is said on CPU runs only, not beside a GPU's results
  CHECK(m.summary().find("bf16 kernels native") != std::string::npos);
  mg::bench::Machine on_gpu = m;
  on_gpu.gpu = "NVIDIA H200";
  CHECK(on_gpu.summary().find("bf16 kernels") == std::string::npos);
  CHECK(md.find("- commit: abc1234") != std::string::npos);
  CHECK(md.find("- command: `bench_amp --threads 1`") != std::string::npos);
  CHECK(md.find("- note: shared machine") != std::string::npos);
  std::size_t rows = 0, pos = 0;
  while ((pos = md.find("\n| mlp | ", pos)) != std::string::npos) ++rows, ++pos;
  CHECK(rows == 4);
}

// The recorded command must re-run: a ' inside an argument, shell metacharacters and an empty
// argument were written unquoted or half-quoted ("--note 'other engineers' builds'").
TEST_CASE("report: the recorded command is quoted for the shell and fenced for Markdown", "[bench]") {
  CHECK(mg::bench::shell_command({"bench_amp", "--models", "mlp,resnet20", "--threads", "2"}) ==
        "bench_amp --models mlp,resnet20 --threads 2");
  CHECK(mg::bench::shell_command({"bench_amp", "--note", "other engineers' builds", ""}) ==
        R"(bench_amp --note 'other engineers'\'' builds' '')");
  CHECK(mg::bench::shell_command({"x", "a;b", "$HOME", "a`b`"}) == "x 'a;b' '$HOME' 'a`b`'");
  CHECK(mg::bench::markdown_code("bench_amp --threads 2") == "`bench_amp --threads 2`");
  CHECK(mg::bench::markdown_code("x 'a`b`'") == "``x 'a`b`'``");
  CHECK(mg::bench::markdown_code("`x`") == "`` `x` ``");
}

TEST_CASE("the recorded commit is the one the program was built from, and says when the tree moved on", "[bench]") {
  // It was read from the source tree when the benchmark ran: a binary built before a pull was
  // recorded as the new commit. Outside a repository the tree's is "unknown".
  CHECK(mg::bench::describe_machine(1, "/nonexistent-dir", "abc1234").commit ==
        "abc1234; the source tree is now at unknown");
  CHECK(mg::bench::describe_machine(1, "/nonexistent-dir", "").commit == "unknown");
  CHECK(mg::bench::describe_machine(1, "/nonexistent-dir", "unknown").commit == "unknown");
}
