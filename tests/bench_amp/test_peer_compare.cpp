// bench_amp beside PyTorch (benchmarks/amp/peer_compare.h) on hand-made JSON lines of both
// programs: parsing, the pairing of our configurations with PyTorch's modes, the best round of
// each side, the ratios and the targets, and the table, JSON and Markdown.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "benchmarks/amp/peer_compare.h"

using mg::bench::Comparison;
using mg::bench::Measurement;

namespace {

// A bench_amp line as write_json_lines writes it on CUDA (the fields compare reads).
std::string ours(const std::string& model, const std::string& level, const std::string& dtype, bool tf32,
                 double median_s, double syncs) {
  nlohmann::json j = {{"model", model}, {"level", level}, {"dtype", dtype}, {"tf32", tf32},
                      {"label", level + " " + (tf32 ? "tf32" : dtype)}, {"batch", 256}, {"unit", "img"},
                      {"device", "cuda"}, {"wall_median_s", median_s}, {"wall_min_s", 0.9 * median_s},
                      {"wall_max_s", 1.1 * median_s}, {"peak_tensor_bytes", int64_t(3) << 30},
                      {"peak_rss_bytes", int64_t(1) << 30}, {"syncs_per_step", syncs}, {"loss_final", 6.9},
                      {"layout", "NHWC"}, {"commit", "abc1234"}, {"date", "2026-12-02 10:00 UTC"},
                      {"command", "bench_amp --device cuda --models " + model},
                      {"machine", {{"gpu", "NVIDIA H200"}, {"gpu_driver", "CUDA driver 13.0, runtime 13.0"},
                                   {"processor", "Test CPU"}}}};
  return j.dump();
}

// A PyTorch peer line (benchmarks/torch_amp_peer.py --worker on CUDA).
std::string peer(const std::string& model, const std::string& mode, double median_s) {
  nlohmann::json j = {{"framework", "pytorch"}, {"torch", "2.11.0"}, {"model", model}, {"mode", mode},
                      {"batch", 256}, {"unit", "img"}, {"wall_median_s", median_s}, {"wall_min_s", median_s},
                      {"wall_max_s", median_s}, {"peak_device_bytes", int64_t(2) << 30}, {"syncs_per_step", 0},
                      {"loss_final", 6.95}, {"memory_format", "channels-last"}, {"device_name", "NVIDIA H200"},
                      {"command", "python3 torch_amp_peer.py --worker --model " + model}};
  return j.dump();
}

std::vector<Measurement> parse(const std::vector<std::string>& lines) {
  std::vector<Measurement> out;
  for (const std::string& l : lines) out.push_back(mg::bench::parse_measurement(l));
  return out;
}

const Comparison& row(const std::vector<Comparison>& rows, const std::string& config) {
  for (const Comparison& c : rows) {
    if (c.ours.config == config) return c;
  }
  FAIL("no row " << config);
  return rows.front();
}

bool has(const std::vector<std::string>& v, const std::string& part) {
  for (const std::string& s : v) {
    if (s.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("compare: both programs' lines parse into measurements", "[bench]") {
  const Measurement o = mg::bench::parse_measurement(ours("resnet50", "O0", "f32", true, 0.2, 0));
  CHECK(o.framework == "mixgrad");
  CHECK(o.config == "O0 tf32");
  CHECK(o.peak_bytes == int64_t(3) << 30);  // on CUDA the allocator's peak, not the RSS
  CHECK(o.syncs_per_step == 0);
  CHECK(o.layout == "NHWC");
  CHECK(o.device == "NVIDIA H200 (CUDA driver 13.0, runtime 13.0)");
  CHECK(o.version == "abc1234");
  const Measurement p = mg::bench::parse_measurement(peer("resnet50", "autocast-bf16", 0.1));
  CHECK(p.framework == "pytorch");
  CHECK(p.config == "autocast-bf16");
  CHECK(p.peak_bytes == int64_t(2) << 30);
  CHECK(p.layout == "channels-last");
  CHECK(p.version == "torch 2.11.0");
  // A CPU line of ours: no sync count, the peak RSS.
  nlohmann::json cpu = nlohmann::json::parse(ours("mlp", "O1", "bf16", false, 0.01, 0));
  cpu["device"] = "cpu";
  cpu.erase("syncs_per_step");
  const Measurement c = mg::bench::parse_measurement(cpu.dump());
  CHECK(c.syncs_per_step == -1);
  CHECK(c.peak_bytes == int64_t(1) << 30);
  CHECK(c.device == "Test CPU");
}

TEST_CASE("compare: bad lines say what is wrong", "[bench]") {
  CHECK_THROWS_WITH(mg::bench::parse_measurement("{\"model\": \"mlp\"}"), Catch::Contains("neither \"level\""));
  nlohmann::json j = nlohmann::json::parse(peer("mlp", "fp32", 0.1));
  j.erase("wall_median_s");
  CHECK_THROWS_WITH(mg::bench::parse_measurement(j.dump()), Catch::Contains("no \"wall_median_s\" field"));
  j["wall_median_s"] = "fast";
  CHECK_THROWS_WITH(mg::bench::parse_measurement(j.dump()), Catch::Contains("\"wall_median_s\" has the wrong type"));
  j["wall_median_s"] = 0.0;
  CHECK_THROWS_WITH(mg::bench::parse_measurement(j.dump()), Catch::Contains("expected > 0"));
  CHECK_THROWS_WITH(mg::bench::parse_measurement("not json"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(mg::bench::read_measurements("/nonexistent-dir/x.jsonl"), Catch::Contains("cannot read"));
}

TEST_CASE("compare: each configuration of ours pairs with its PyTorch mode", "[bench]") {
  CHECK(mg::bench::peer_mode("O0 f32") == "fp32");
  CHECK(mg::bench::peer_mode("O0 tf32") == "tf32");
  CHECK(mg::bench::peer_mode("O1 f16") == "autocast-f16");
  CHECK(mg::bench::peer_mode("O2 bf16") == "autocast-bf16");
  CHECK(mg::bench::peer_mode("O3 f16") == "f16");
  CHECK(mg::bench::peer_mode("O3 bf16") == "bf16");
  CHECK_THROWS_WITH(mg::bench::peer_mode("O4 f16"), Catch::Contains("no PyTorch mode pairs with 'O4 f16'"));
}

TEST_CASE("compare: ratios, speed-ups over O0 f32, best rounds and the targets", "[bench]") {
  const auto us = parse({ours("resnet50", "O0", "f32", false, 0.100, 0), ours("resnet50", "O0", "f32", false, 0.120, 0),
                         ours("resnet50", "O1", "f16", false, 0.040, 0), ours("resnet50", "O2", "f16", false, 0.060, 2),
                         ours("resnet50", "O3", "bf16", false, 0.030, 0)});
  const auto pt = parse({peer("resnet50", "fp32", 0.095), peer("resnet50", "fp32", 0.090),
                         peer("resnet50", "autocast-f16", 0.050), peer("bert-base", "autocast-f16", 0.010)});
  const auto rows = mg::bench::compare_with_peer(us, pt);
  REQUIRE(rows.size() == 4);  // one per (model, config) of ours, rounds merged
  const Comparison& o0 = row(rows, "O0 f32");
  CHECK(o0.ours_rounds == 2);
  CHECK(o0.ours.wall_median_s == 0.100);  // the best round of ours
  CHECK(o0.peer_rounds == 2);
  CHECK(o0.peer->wall_median_s == 0.090);  // ... and of PyTorch's
  CHECK(o0.ratio == Approx(0.100 / 0.090));
  CHECK(o0.speedup_vs_o0 == Approx(1.0));
  CHECK(has(o0.missed, "slower than PyTorch: 1.11x"));
  const Comparison& o1 = row(rows, "O1 f16");
  CHECK(o1.peer->config == "autocast-f16");
  CHECK(o1.ratio == Approx(0.8));
  CHECK(o1.speedup_vs_o0 == Approx(2.5));
  CHECK(o1.missed.empty());
  const Comparison& o2 = row(rows, "O2 f16");
  CHECK(o2.ratio == Approx(1.2));
  CHECK(has(o2.missed, "slower than PyTorch"));
  CHECK(has(o2.missed, "O2 is 1.67x our O0 f32"));
  CHECK(has(o2.missed, "2 host synchronisations per step"));
  const Comparison& o3 = row(rows, "O3 bf16");
  CHECK_FALSE(o3.peer.has_value());
  CHECK(o3.ratio == -1);
  CHECK(o3.missed == std::vector<std::string>{"no PyTorch measurement of bf16"});  // O3: no 2x or sync target

  const std::string table = mg::bench::format_comparison(rows);
  CHECK(table.find("autocast-f16") != std::string::npos);
  CHECK(table.find("bf16 (missing)") != std::string::npos);
  CHECK(table.find("missed: resnet50 O2 f16: 2 host synchronisations per step (target 0)") != std::string::npos);
  const auto cells = mg::bench::comparison_rows(rows);
  REQUIRE(cells[1].size() == mg::bench::comparison_header().size());
  CHECK(cells[1][7] == "0.80");   // ours/PT
  CHECK(cells[1][10] == "2.50x"); // x O0 f32
  CHECK(cells[1][19] == "met");
}

TEST_CASE("compare: a PyTorch measurement of another batch is not compared", "[bench]") {
  // A smoke file beside a full one: the ratio said 0.03 and "every target met" before.
  nlohmann::json small = nlohmann::json::parse(peer("resnet50", "autocast-f16", 0.001));
  small["batch"] = 8;
  const auto rows = mg::bench::compare_with_peer(parse({ours("resnet50", "O1", "f16", false, 0.040, 0)}),
                                                 parse({small.dump()}));
  REQUIRE(rows.size() == 1);
  CHECK_FALSE(rows[0].peer.has_value());
  CHECK(rows[0].ratio == -1);
  CHECK(has(rows[0].missed, "PyTorch's autocast-f16 ran batch 8, ours 256: not compared"));
  CHECK(mg::bench::format_comparison(rows).find("every target met") == std::string::npos);
}

TEST_CASE("compare: every target met says so, and JSON and Markdown carry both sides", "[bench]") {
  const auto rows = mg::bench::compare_with_peer(
      parse({ours("bert-base", "O0", "f32", false, 0.2, 0), ours("bert-base", "O1", "bf16", false, 0.05, 0)}),
      parse({peer("bert-base", "fp32", 0.25), peer("bert-base", "autocast-bf16", 0.06)}));
  CHECK(mg::bench::format_comparison(rows).find("every target met") != std::string::npos);

  const std::string base = "test_peer_compare_" + std::to_string(::getpid());
  mg::bench::write_comparison_json(base + ".jsonl", rows);
  std::ifstream f(base + ".jsonl");
  std::string line;
  std::vector<nlohmann::json> js;
  while (std::getline(f, line)) js.push_back(nlohmann::json::parse(line));
  std::remove((base + ".jsonl").c_str());
  REQUIRE(js.size() == 2);
  CHECK(js[1]["mixgrad"]["config"] == "O1 bf16");
  CHECK(js[1]["pytorch"]["config"] == "autocast-bf16");
  CHECK(js[1]["ratio"].get<double>() == Approx(0.05 / 0.06));
  CHECK(js[1]["speedup_vs_o0_f32"].get<double>() == Approx(4.0));
  CHECK(js[1]["mixgrad"]["syncs_per_step"] == 0);
  CHECK(js[1]["targets_missed"].empty());

  std::remove((base + ".md").c_str());
  mg::bench::append_comparison_markdown(base + ".md", rows, {"driver: python3 benchmarks/torch_amp_peer.py --device cuda"});
  std::ifstream mf(base + ".md");
  std::stringstream md;
  md << mf.rdbuf();
  std::remove((base + ".md").c_str());
  CHECK(md.str().find("## bench_amp beside PyTorch, 2026-12-02 10:00 UTC") != std::string::npos);
  CHECK(md.str().find("- device: NVIDIA H200 (CUDA driver 13.0, runtime 13.0)") != std::string::npos);
  CHECK(md.str().find("- commit: abc1234; torch 2.11.0") != std::string::npos);
  CHECK(md.str().find("- driver: python3 benchmarks/torch_amp_peer.py --device cuda") != std::string::npos);
  CHECK(md.str().find("  - `bench_amp --device cuda --models bert-base`") != std::string::npos);
  CHECK(md.str().find("| bert-base | O1 bf16 | autocast-bf16 | 50.0 |") != std::string::npos);
  CHECK_THROWS_WITH(mg::bench::append_comparison_markdown("/nonexistent-dir/x.md", rows, {}), Catch::Contains("cannot append"));
}
