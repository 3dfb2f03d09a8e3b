// Metrics: JSON lines written by MetricsWriter round-trip through nlohmann::json — exact integers
// (int64 and uint64 extremes), doubles bit-exact, NaN/inf as null with the key kept, escaped
// strings, bools — each line is flushed at once; append mode drops a cut-off last line; key and
// file errors; the reader names a bad line; peak RSS from /proc/self/status.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "examples/common/metrics.h"
#include "examples/common/metrics_reader.h"
#include "examples/common/process_memory.h"
#include "examples_test_util.h"
#include "test_util.h"

using namespace mg::example;
using mg::test::read_file;
using mg::test::TempDir;

TEST_CASE("metrics: records round-trip through nlohmann::json, non-finite numbers as null", "[examples][metrics]") {
  TempDir dir;
  const std::string path = dir.file("run.jsonl");
  {
    MetricsWriter w(path);
    CHECK(w.path() == path);
    w.write({{"kind", "step"},
             {"epoch", 3},
             {"step", int64_t(1200)},
             {"loss", 0.1},
             {"scale", 65536.0},
             {"skipped", false},
             {"lr", 1e-4f}});
    w.write({{"kind", "step"},
             {"loss", std::numeric_limits<double>::quiet_NaN()},
             {"grad_norm", std::numeric_limits<double>::infinity()},
             {"min", -std::numeric_limits<double>::infinity()},
             {"skipped", true},
             {"note", nullptr}});
    w.write({{"text", "quote \" backslash \\ newline \n tab \t <&> caf\xc3\xa9"},
             {"big", std::numeric_limits<int64_t>::max()},
             {"small", std::numeric_limits<int64_t>::min()},
             {"seed", std::numeric_limits<uint64_t>::max()},
             {"tiny", 5e-324},
             {"third", 1.0 / 3.0}});
    w.write({});
  }
  const std::string text = read_file(path);
  CHECK(
      text.starts_with("{\"kind\":\"step\",\"epoch\":3,\"step\":1200,\"loss\":0.1,\"scale\":65536,\"skipped\":false,"
                       "\"lr\":1e-04}\n"));  // a float as a float
  CHECK(std::count(text.begin(), text.end(), '\n') == 4);

  const std::vector<nlohmann::json> r = read_metrics(path);
  REQUIRE(r.size() == 4);
  CHECK(r[0]["kind"] == "step");
  CHECK(r[0]["epoch"].get<int64_t>() == 3);
  CHECK(r[0]["loss"].get<double>() == 0.1);
  CHECK(r[0]["scale"].get<double>() == 65536.0);
  CHECK(r[0]["skipped"] == false);
  CHECK(r[0]["lr"].get<float>() == 1e-4f);
  // NaN and inf: null, key still there
  for (const char* key : {"loss", "grad_norm", "min", "note"}) {
    INFO(key);
    REQUIRE(r[1].contains(key));
    CHECK(r[1][key].is_null());
  }
  CHECK(r[1]["skipped"] == true);
  CHECK(r[2]["text"].get<std::string>() == "quote \" backslash \\ newline \n tab \t <&> caf\xc3\xa9");
  CHECK(r[2]["big"].get<int64_t>() == std::numeric_limits<int64_t>::max());
  CHECK(r[2]["small"].get<int64_t>() == std::numeric_limits<int64_t>::min());
  CHECK(r[2]["seed"].get<uint64_t>() == std::numeric_limits<uint64_t>::max());
  CHECK(r[2]["tiny"].get<double>() == 5e-324);
  CHECK(r[2]["third"].get<double>() == 1.0 / 3.0);  // shortest round-trip text, bit-exact
  CHECK(r[3].empty());
  // key order is kept as written
  std::vector<std::string> keys;
  const nlohmann::ordered_json first = nlohmann::ordered_json::parse(text.substr(0, text.find('\n')));
  for (const auto& [k, v] : first.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"kind", "epoch", "step", "loss", "scale", "skipped", "lr"});
}

TEST_CASE("metrics: every line is on disk as soon as write() returns", "[examples][metrics]") {
  TempDir dir;
  MetricsWriter w(dir.file("m.jsonl"));
  w.write({{"step", 1}});
  CHECK(read_file(dir.file("m.jsonl")) == "{\"step\":1}\n");
  w.write({{"step", 2}});
  CHECK(read_file(dir.file("m.jsonl")) == "{\"step\":1}\n{\"step\":2}\n");
}

TEST_CASE("metrics: append mode continues a file and drops a cut-off last line", "[examples][metrics]") {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  { std::ofstream(path) << "{\"step\":1}\n{\"step\":2}\n{\"ste"; }  // a run killed mid-write
  {
    MetricsWriter w(path, {.append = true});
    w.write({{"step", 3}});
  }
  CHECK(read_file(path) == "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  { std::ofstream(path) << "{\"ste"; }  // only a partial line
  { MetricsWriter(path, {.append = true}).write({{"step", 1}}); }
  CHECK(read_file(path) == "{\"step\":1}\n");
  { MetricsWriter(dir.file("new.jsonl"), {.append = true}).write({{"a", 1}}); }  // append to a new file
  CHECK(read_file(dir.file("new.jsonl")) == "{\"a\":1}\n");
  { MetricsWriter(path).write({{"b", 2}}); }  // without append: a new file
  CHECK(read_file(path) == "{\"b\":2}\n");
}

TEST_CASE("metrics: bad records, files and lines are errors", "[examples][metrics]") {
  TempDir dir;
  MetricsWriter w(dir.file("m.jsonl"));
  MG_REQUIRE_ERROR(w.write({{"loss", 1.0}, {"loss", 2.0}}), "MetricsWriter: key \"loss\" appears twice in one record");
  MG_REQUIRE_ERROR(w.write({{"", 1}}), "MetricsWriter: a record has an empty key");
  MG_REQUIRE_ERROR(w.write({{"s", "bad \xff utf-8"}}), "is not valid UTF-8");
  CHECK(read_file(dir.file("m.jsonl")).empty());  // nothing half-written
  MG_REQUIRE_ERROR(MetricsWriter(dir.file("missing/m.jsonl")), "MetricsWriter: cannot open");

  { std::ofstream(dir.file("bad.jsonl")) << "{\"a\":1}\n\n[1,2]\n"; }
  MG_REQUIRE_ERROR(read_metrics(dir.file("bad.jsonl")), "line 3 is not a JSON object: \"[1,2]\"");
  { std::ofstream(dir.file("bad2.jsonl")) << "{\"a\":NaN}\n"; }
  MG_REQUIRE_ERROR(read_metrics(dir.file("bad2.jsonl")), "line 1 is not a JSON object");
  MG_REQUIRE_ERROR(read_metrics(dir.file("none.jsonl")), "read_metrics: cannot open");
}

TEST_CASE("metrics: peak resident set size from /proc/self/status", "[examples][metrics]") {
  const int64_t before = current_rss_bytes();
  REQUIRE(before > 0);
  REQUIRE(peak_rss_bytes() >= before);
  // touch 64 MiB more than is resident now: the peak must rise above it
  const std::size_t n = 64u << 20;
  std::vector<char> block(n);
  // Through a volatile pointer: clang otherwise removes the unobserved allocation and memset.
  char* volatile data = block.data();
  std::memset(data, 1, n);
  volatile char sink = data[n / 2];
  (void)sink;
  CHECK(peak_rss_bytes() >= before + int64_t(60u << 20));
  CHECK(peak_rss_bytes() >= current_rss_bytes());
}
