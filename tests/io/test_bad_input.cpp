// The bad-input sweep of issue 18 for the two JSON readers (safetensors and checkpoints): truncated
// files, lying lengths and offsets, overflowing sizes, wrong dtypes, duplicate names, deep nesting
// and huge numbers, each answered by a named mg::Error with a bounded message — never another
// exception, a crash, a hang or a huge allocation. (tests/datasets/test_idx.cpp and
// tests/text/test_wordpiece.cpp hold the IDX and vocabulary cases; tests/fuzz replays the corpus.)
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/state_dict.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "nn/linear.h"
#include "io/json_parse.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// A safetensors file: the 8-byte little-endian header length, the header, the data.
std::string st_bytes(const std::string& header, const std::string& data = "") {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// The message of the mg::Error that loading `bytes` throws, checking that it names the reader and
// the file, stays short and comes quickly.
std::string load_error(const TempDir& dir, const std::string& bytes, bool checkpoint = false) {
  const std::string path = dir.file("f.safetensors");
  write_bytes(path, bytes);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = checkpoint ? error_of([&] { io::load_checkpoint(path); })
                                     : error_of([&] { io::load_safetensors(path); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("message: " << msg);
  REQUIRE(!msg.empty());
  CHECK_THAT(msg, Catch::Matchers::StartsWith(std::string(checkpoint ? "load_checkpoint" : "load_safetensors") +
                                              ": \"" + path + "\": "));
  CHECK(msg.size() < 1200);
  CHECK(seconds < 5.0);
  return msg;
}

// A checkpoint whose "mixgrad.checkpoint" metadata string is `contents`.
std::string checkpoint_bytes(const std::string& contents) {
  std::string escaped;
  for (char c : contents) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return st_bytes(R"({"__metadata__":{"mixgrad.kind":"checkpoint","mixgrad.checkpoint_version":"1",)"
                  R"("mixgrad.checkpoint":")" + escaped + "\"}}");
}

const std::string kEntry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

}  // namespace

TEST_CASE("bad input: every truncation of a safetensors file is a named error", "[io][safetensors][errors]") {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  io::save_safetensors(path, {{"a", full({3}, 1.5)}, {"b", full({2, 2}, 2.0, {.dtype = DType::F16})}}, {{"k", "v"}});
  const std::string good = read_bytes(path);
  const uint64_t n = header_length(good);
  for (std::size_t len = 0; len < good.size(); ++len) {
    INFO("truncated to " << len << " of " << good.size() << " bytes");
    const std::string msg = load_error(dir, good.substr(0, len));
    if (len < 8) {
      CHECK_THAT(msg, Catch::Matchers::Contains("too few for a safetensors file"));
    } else if (len < 8 + n) {
      CHECK_THAT(msg, Catch::Matchers::Contains("(bytes 0-7) exceeds the"));
    } else {
      CHECK_THAT(msg, Catch::Matchers::Contains("reach beyond the data buffer"));
    }
  }
}

TEST_CASE("bad input: every truncation of a checkpoint is a named error", "[io][checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  nn::Linear model({.in = 2, .out = 2});
  StateDict s;
  s.ints["step"] = 3;
  s.tensors = {{"m", zeros({2})}};
  io::save_checkpoint(path, model, {{"opt", s}});
  const std::string good = read_bytes(path);
  for (std::size_t len = 0; len < good.size(); ++len) {
    INFO("truncated to " << len << " of " << good.size() << " bytes");
    load_error(dir, good.substr(0, len), true);
  }
}

TEST_CASE("bad input: lying lengths and offsets", "[io][safetensors][errors]") {
  TempDir dir;
  // Header lengths of 2^63 and 2^64 - 1 with a 2-byte header: refused before any allocation.
  for (const uint64_t n : {uint64_t(1) << 63, ~uint64_t(0)}) {
    std::string b(reinterpret_cast<const char*>(&n), 8);
    CHECK_THAT(load_error(dir, b + "{}"), Catch::Matchers::Contains(str_cat("the header length ", n, " (bytes 0-7) exceeds the 2 bytes")));
  }
  const std::string data(8, '\0');
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8000000000]}})", data)),
             Catch::Matchers::Contains("needs 8 bytes but data_offsets [0, 8000000000] span 8000000000"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2000000000],"data_offsets":[0,8000000000]}})", data)),
             Catch::Matchers::Contains("data_offsets [0, 8000000000] reach beyond the data buffer, which has 8 bytes"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,7]}})", data)),
             Catch::Matchers::Contains("expected [begin, end] with non-negative integers"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)),
             Catch::Matchers::Contains("data_offsets [8, 0] end before they begin"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":)" + kEntry + R"(,"b":)" + kEntry + "}", data)),
             Catch::Matchers::Contains("overlap those of tensor \"a\" [0, 8]"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,16]}})", data)),
             Catch::Matchers::Contains("\"data_offsets\" is [0,8,16], expected [begin, end]"));
}

TEST_CASE("bad input: overflowing sizes and wrong dtypes", "[io][safetensors][errors]") {
  TempDir dir;
  auto entry = [](const std::string& dtype, const std::string& shape) {
    return st_bytes(R"({"a":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":[0,0]}})");
  };
  CHECK_THAT(load_error(dir, entry("\"F64\"", "[4294967296,4294967296]")),
             Catch::Matchers::Contains("shape [4294967296, 4294967296] has more elements than fit in 64 bits"));
  CHECK_THAT(load_error(dir, entry("\"U8\"", "[9223372036854775808]")),
             Catch::Matchers::Contains("has an entry that is not a non-negative 64-bit integer: 9223372036854775808"));
  // 2^64 and beyond parse as doubles, not integers.
  CHECK_THAT(load_error(dir, entry("\"U8\"", "[18446744073709551616]")),
             Catch::Matchers::Contains("has an entry that is not a non-negative 64-bit integer"));
  CHECK_THAT(load_error(dir, entry("\"U8\"", "[" + repeat("1,", 64) + "1]")),
             Catch::Matchers::Contains("has 65 dimensions; mixgrad reads at most 64"));
  CHECK_THAT(load_error(dir, entry("\"F8_E4M3\"", "[0]")), Catch::Matchers::Contains("unsupported dtype \"F8_E4M3\""));
  CHECK_THAT(load_error(dir, entry("\"\"", "[0]")), Catch::Matchers::Contains("unsupported dtype \"\""));
  CHECK_THAT(load_error(dir, entry("3", "[0]")), Catch::Matchers::Contains("\"dtype\" is a JSON number, expected a string"));
  CHECK_THAT(load_error(dir, entry("\"F32\"", "7")), Catch::Matchers::Contains("\"shape\" is a JSON number"));
}

TEST_CASE("bad input: duplicate names at every level", "[io][safetensors][checkpoint][errors]") {
  TempDir dir;
  const std::string data(8, '\0');
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":)" + kEntry + R"(,"a":)" + kEntry + "}", data)),
             Catch::Matchers::Contains("the header names \"a\" twice"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}})", data)),
             Catch::Matchers::Contains("the entry of \"a\" has the key \"shape\" twice"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"__metadata__":{"k":"1","k":"2"}})")),
             Catch::Matchers::Contains("the entry of \"__metadata__\" has the key \"k\" twice"));
  // Inside the checkpoint's own JSON: a repeated integer key would silently keep one value.
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"s","ints":{"a":1,"a":2}}]})"), true),
             Catch::Matchers::Contains("the \"mixgrad.checkpoint\" metadata") );
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"s","ints":{"a":1,"a":2}}]})"), true),
             Catch::Matchers::Contains("has the key \"a\" twice"));
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"s"},{"name":"s"}]})"), true),
             Catch::Matchers::Contains("invalid or repeated state name \"s\""));
}

TEST_CASE("bad input: a header of millions of tiny values is refused before the tree is built", "[io][safetensors][errors]") {
  // {"a":[{},{},...]} of 4M+1 values (12 MB): each costs ~80 bytes in the parsed tree, so a 100 MB
  // header peaked at 3.4 GB before. The count stops the key pass early and refuses it.
  TempDir dir;
  std::string text = R"({"a":[)";
  text.reserve(13'000'000);
  for (std::size_t i = 0; i < io::detail::kMaxJsonValues; ++i) text += "{},";
  text += "{}]}";
  CHECK_THAT(load_error(dir, st_bytes(text)), Catch::Matchers::Contains("the header holds more than 4000000 JSON values"));
}

TEST_CASE("bad input: deep nesting is refused before the parser recurses", "[io][safetensors][checkpoint][errors]") {
  TempDir dir;
  // 64 levels are accepted by the parser (the file is then wrong for other reasons), 65 are not.
  const std::string at_limit = st_bytes(R"({"__metadata__":{"k":)" + repeat("[", 62) + repeat("]", 62) + "}}");
  CHECK_THAT(load_error(dir, at_limit), Catch::Matchers::Contains("metadata entry \"k\" is a JSON array"));
  const std::string over = st_bytes(R"({"__metadata__":{"k":)" + repeat("[", 63) + repeat("]", 63) + "}}");
  CHECK_THAT(load_error(dir, over),
             Catch::Matchers::Contains("the header nests arrays and objects more than 64 levels deep (at byte 83)"));
  // The issue's file: 105,000 levels (210 KB), which overflowed the stack. Brackets inside
  // strings do not count.
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":)" + repeat("[", 105000) + repeat("]", 105000) + R"(,"b":0})")),
             Catch::Matchers::Contains("more than 64 levels deep"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"__metadata__":{"k":")" + repeat("[{", 1000) + R"(\"]"}, "a":)" + kEntry + "}")),
             Catch::Matchers::Contains("tensor \"a\": data_offsets [0, 8] reach beyond the data buffer"));
  // The same inside the checkpoint's contents string.
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[)" + repeat("[", 105000) + repeat("]", 105000) + "]}"), true),
             Catch::Matchers::Contains("the \"mixgrad.checkpoint\" metadata nests arrays and objects more than 64 levels deep"));
}

TEST_CASE("bad input: numbers beyond a double are named errors", "[io][safetensors][checkpoint][errors]") {
  TempDir dir;
  // The issue's 19-byte file, which ended in std::terminate.
  const std::string tiny = st_bytes(R"({"a":1e999})");
  REQUIRE(tiny.size() == 19);
  CHECK_THAT(load_error(dir, tiny), Catch::Matchers::Contains("the header has a number beyond the range of a double: "
                                                             "[json.exception.out_of_range.406] number overflow parsing '1e999'"));
  CHECK_THAT(load_error(dir, tiny, true), Catch::Matchers::Contains("the header has a number beyond the range of a double"));
  CHECK_THAT(load_error(dir, st_bytes(R"({"a":{"dtype":"F32","shape":[-1e999],"data_offsets":[0,0]}})")),
             Catch::Matchers::Contains("number overflow parsing '-1e999'"));
  // A 300,000-digit number: the JSON library's message quotes the token; ours cuts it.
  const std::string msg = load_error(dir, st_bytes(R"({"a":)" + repeat("9", 300000) + "}"));
  CHECK_THAT(msg, Catch::Matchers::Contains("number overflow parsing '999"));
  CHECK_THAT(msg, Catch::Matchers::EndsWith(" ..."));
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[],"x":1e999})"), true),
             Catch::Matchers::Contains("the \"mixgrad.checkpoint\" metadata has a number beyond the range of a double"));
  // An integer state value beyond int64 is a named error, not a wrapped one.
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"s","ints":{"a":9223372036854775808}}]})"), true),
             Catch::Matchers::Contains("state \"s\": integer \"a\" is 9223372036854775808"));
}

TEST_CASE("bad input: error messages print bounded excerpts", "[io][safetensors][checkpoint][errors]") {
  TempDir dir;
  // A 300,000-byte tensor name and a 100,000-entry shape array.
  std::string msg = load_error(dir, st_bytes("{\"" + repeat("n", 300000) + R"(":{"dtype":"X","shape":[],"data_offsets":[0,0]}})"));
  CHECK_THAT(msg, Catch::Matchers::Contains("(cut; 300000 bytes): unsupported dtype \"X\""));
  msg = load_error(dir, st_bytes(R"({"a":{"dtype":"U8","shape":[)" + repeat("1,", 100000) + R"(-1],"data_offsets":[0,0]}})"));
  CHECK_THAT(msg, Catch::Matchers::Contains("has 100001 dimensions; mixgrad reads at most 64"));
  CHECK_THAT(msg, Catch::Matchers::Contains("shape [1,1,1,"));
  CHECK_THAT(msg, Catch::Matchers::Contains("... (cut)"));
  // A checkpoint string value that is a huge array: the message shows its start only.
  msg = load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"s","strings":{"a":[)" + repeat("12345,", 50000) + "1]}}]}"), true);
  CHECK_THAT(msg, Catch::Matchers::Contains("state \"s\": string \"a\" is [12345,12345,"));
  CHECK_THAT(msg, Catch::Matchers::Contains("... (cut)"));
}

TEST_CASE("bad input: a header with 200,000 keys is refused in linear time, not quadratic", "[io][safetensors][errors]") {
  // Parsed into an insertion-ordered object (a linear search per key), 200,000 keys took about
  // 30 s; parsed into a std::map with the order recorded, a fraction of a second.
  TempDir dir;
  std::string many = R"({"__metadata__":{)";
  for (int i = 0; i < 200000; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
  many += R"(},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,9]}})";
  CHECK_THAT(load_error(dir, st_bytes(many, std::string(8, '\0'))),  // load_error: under 5 s
             Catch::Matchers::Contains("needs 8 bytes but data_offsets [0, 9] span 9"));
}

TEST_CASE("bad input: 100,000 objects in one container parse in linear time", "[io][safetensors][errors]") {
  // nlohmann's callback parser rescans a container's children each time one of its objects
  // closes: a 1 MB header of 100,000 empty entries took 65 s. The key check is its own SAX pass now.
  TempDir dir;
  std::string many = "{";
  for (int i = 0; i < 100000; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\":{}";
  many += "}";
  CHECK_THAT(load_error(dir, st_bytes(many, "")),  // load_error: under 5 s
             Catch::Matchers::Contains("\"0\""));
  // and the duplicate check still runs over the whole text, at any level
  TempDir dir2;
  std::string dup = "{";
  for (int i = 0; i < 100000; ++i) dup += (i ? ",\"" : "\"") + std::to_string(i) + "\":{}";
  dup += ",\"7\":{}}";
  CHECK_THAT(load_error(dir2, st_bytes(dup, "")), Catch::Matchers::Contains("names \"7\" twice"));
}

TEST_CASE("bad input: a newer checkpoint format is named before its tensor entries are parsed",
          "[io][checkpoint][errors]") {
  // A version-3 file may use a dtype or field this build does not know: the version is the error.
  TempDir dir;
  const std::string msg = load_error(dir,
                                     st_bytes(R"({"__metadata__":{"mixgrad.kind":"checkpoint","mixgrad.checkpoint_version":"3"},)"
                                              R"("t":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1],"scale":2}})",
                                              std::string(1, '\0')),
                                     /*checkpoint=*/true);
  CHECK_THAT(msg, Catch::Matchers::Contains("written by a newer mixgrad (checkpoint format version 3"));
}

TEST_CASE("bad input: a checkpoint's contents with an unknown entry are refused, not ignored",
          "[io][checkpoint][errors]") {
  TempDir dir;
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[],"extra":1})"), true),
             Catch::Matchers::Contains("the \"mixgrad.checkpoint\" metadata has an unknown entry \"extra\""));
  CHECK_THAT(load_error(dir, checkpoint_bytes(R"({"model":[],"states":[{"name":"opt","int":{"a":1}}]})"), true),
             Catch::Matchers::Contains("state \"opt\" has an unknown entry \"int\""));
}
