// safetensors: bit-exact round trips of every dtype (NaN payloads, -0.0, subnormals), 0-d and empty
// tensors, non-contiguous input, metadata; the exact bytes the reference implementation writes;
// the Python-written reference file; every corruption a reader must catch; atomic writes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include "data/idx.h"
#include "data/text/wordpiece.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// The tensors of tests/data/reference/python_written.safetensors (tools/reference/gen_safetensors.py),
// in the order the reference writer lays them out (element size descending, then name).
nn::NamedTensors reference_tensors() {
  return {
      {"i64", from_vector<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -1,
                                    1234567890123456789})},
      // 0.1, -0.0, 1e-300, 5e-324 (smallest subnormal), inf, NaN with payload 1
      {"f64", from_bits<uint64_t>({0x3FB999999999999Aull, 0x8000000000000000ull, 0x01A56E1FC2F8F359ull, 0x1ull,
                                   0x7FF0000000000000ull, 0x7FF8000000000001ull},
                                  {2, 3}, DType::F64)},
      {"scalar", scalar_tensor(2.5, {.dtype = DType::F64})},
      {"empty", zeros({0, 3})},
      // 1/3, -2^-149, NaN with payload 0x123, -65504
      {"f32", from_bits<uint32_t>({0x3EAAAAABu, 0x80000001u, 0x7FC00123u, 0xC77FE000u}, {4}, DType::F32)},
      {"i32", from_vector<int32_t>({std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), -7})},
      // 1, -123.5, smallest subnormal, -0.0, inf, NaN payload 1
      {"bf16", from_bits<uint16_t>({0x3F80, 0xC2F7, 0x0001, 0x8000, 0x7F80, 0x7FC1}, {2, 3}, DType::BF16)},
      // 1, 65504, 2^-24, -0.0, inf, -inf, NaN payload 1, 0.333251953125
      {"f16", from_bits<uint16_t>({0x3C00, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0xFC00, 0x7E01, 0x3555}, {2, 4},
                                  DType::F16)},
      {"u8", from_vector<uint8_t>({0, 1, 128, 255})},
      {"bool", from_bits<uint8_t>({1, 0, 0, 1}, {2, 2}, DType::Bool)},
  };
}

void require_same(const nn::NamedTensors& got, const nn::NamedTensors& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("tensor " << want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.dtype() == want[i].second.dtype());
    CHECK(got[i].second.shape() == want[i].second.shape());
    CHECK(same_bits(got[i].second, want[i].second));
    // (Tensor::is_contiguous says false for some empty shapes such as [2, 0, 5]; nothing to lay out.)
    if (got[i].second.numel() > 0) CHECK(got[i].second.is_contiguous());
    CHECK(got[i].second.device() == Device::cpu());
  }
}

// data_offsets of `name` as written in the header text.
std::pair<uint64_t, uint64_t> offsets_in_header(const std::string& header, const std::string& name) {
  const std::size_t p = header.find("\"" + name + "\":{");
  REQUIRE(p != std::string::npos);
  const std::size_t q = header.find("\"data_offsets\":[", p);
  REQUIRE(q != std::string::npos);
  unsigned long long b = 0, e = 0;
  REQUIRE(std::sscanf(header.c_str() + q, "\"data_offsets\":[%llu,%llu]", &b, &e) == 2);
  return {b, e};
}

}  // namespace

TEST_CASE("safetensors: a header the reader would refuse is refused at save, before the file exists",
          "[io][safetensors][errors]") {
  TempDir dir;
  const std::string path = dir.file("big.safetensors");
  const std::string huge(100'000'001, 'x');
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{"a", zeros({2})}}, {{"big", huge}}),
                   "more than the 100000000 a reader accepts");
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("safetensors: every dtype round-trips bit for bit", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  const nn::NamedTensors tensors = reference_tensors();
  io::save_safetensors(path, tensors);
  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.path == path);
  CHECK(f.metadata.empty());
  require_same(f.tensors, tensors);
  // Spot checks through values(), independent of the raw-bytes comparison.
  const auto f64 = values(f.at("f64"));
  CHECK(f64[0] == 0.1);
  CHECK(std::signbit(f64[1]));
  CHECK(f64[1] == 0.0);
  CHECK(f64[3] == 4.9406564584124654e-324);
  CHECK(std::isnan(f64[5]));
  CHECK(values(f.at("f16"))[2] == std::ldexp(1.0, -24));
  CHECK(values(f.at("bf16"))[1] == -123.5);
  CHECK(values(f.at("i64"))[0] == -9223372036854775808.0);
  CHECK(f.at("i64").data<int64_t>()[1] == std::numeric_limits<int64_t>::max());
  CHECK(f.at("scalar").dim() == 0);
  CHECK(f.at("scalar").item<double>() == 2.5);
  CHECK(f.at("empty").numel() == 0);
  CHECK(f.contains("u8"));
  CHECK_FALSE(f.contains("nope"));
  MG_REQUIRE_ERROR(f.at("nope"), "has no tensor \"nope\"; it has \"i64\", \"f64\"");
}

TEST_CASE("safetensors: the file layout follows the format", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  // Caller's order: small element sizes first, odd sizes, so the buffer must be reordered to align.
  const nn::NamedTensors tensors = {
      {"a_u8", from_vector<uint8_t>({1, 2, 3})},
      {"b_f16", from_bits<uint16_t>({0x3C00, 0x4000, 0x4200}, {3}, DType::F16)},
      {"c_f64", from_vector<double>({1.0})},
      {"d_f32", from_vector<float>({1.0f, 2.0f, 3.0f})},
  };
  io::save_safetensors(path, tensors, {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  const uint64_t n = header_length(bytes);
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  const std::size_t close = header.find_last_of('}');
  CHECK(header.substr(close + 1) == std::string(n - close - 1, ' '));  // space padding only
  // The header keeps the caller's order, with __metadata__ first.
  CHECK(header.rfind("{\"__metadata__\":{\"k\":\"v\"},\"a_u8\":{\"dtype\":\"U8\",\"shape\":[3],", 0) == 0);
  CHECK(header.find("\"a_u8\"") < header.find("\"b_f16\""));
  CHECK(header.find("\"c_f64\"") < header.find("\"d_f32\""));
  // The buffer is laid out by element size, so each tensor is aligned to its element size.
  CHECK(offsets_in_header(header, "c_f64") == std::pair<uint64_t, uint64_t>{0, 8});
  CHECK(offsets_in_header(header, "d_f32") == std::pair<uint64_t, uint64_t>{8, 20});
  CHECK(offsets_in_header(header, "b_f16") == std::pair<uint64_t, uint64_t>{20, 26});
  CHECK(offsets_in_header(header, "a_u8") == std::pair<uint64_t, uint64_t>{26, 29});
  CHECK(bytes.size() == 8 + n + 29);
  CHECK(bytes.substr(8 + n + 26) == std::string("\x01\x02\x03", 3));
  // And it reads back in the header's order.
  require_same(io::load_safetensors(path).tensors, tensors);
}

TEST_CASE("safetensors: 0-d, empty and tensor-less files", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("small.safetensors");
  const nn::NamedTensors tensors = {
      {"zero_d", scalar_tensor(-3.0, {.dtype = DType::F16})},
      {"empty0", zeros({0}, {.dtype = DType::I64})},
      {"empty_mid", zeros({2, 0, 5}, {.dtype = DType::BF16})},
      {"zero_d_bool", scalar_tensor(1.0, {.dtype = DType::Bool})},
  };
  io::save_safetensors(path, tensors);
  require_same(io::load_safetensors(path).tensors, tensors);

  io::save_safetensors(path, {});
  const std::string bytes = read_bytes(path);
  CHECK(bytes == std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.tensors.empty());
  CHECK(f.metadata.empty());
}

TEST_CASE("safetensors: non-contiguous input is written as its row-major values", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("views.safetensors");
  const Tensor base = arange(0, 24, 1, {.dtype = DType::F32}).reshape({4, 6});
  const Tensor transposed = base.t();                     // [6, 4]
  const Tensor strided = base.slice(1, 1, 6, 2);          // [4, 3], step 2
  const Tensor expanded = arange(0, 3).unsqueeze(0).expand({2, 3});  // stride 0
  const Tensor offset = base.select(0, 2).to(DType::BF16);  // a row, then cast
  REQUIRE_FALSE(transposed.is_contiguous());
  REQUIRE_FALSE(strided.is_contiguous());
  REQUIRE_FALSE(expanded.is_contiguous());
  io::save_safetensors(path, {{"t", transposed}, {"s", strided}, {"e", expanded}, {"o", offset}});
  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.at("t").shape() == Shape{6, 4});
  CHECK(values(f.at("t")) == values(transposed));
  CHECK(values(f.at("t"))[1] == 6.0);
  CHECK(values(f.at("s")) == std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(values(f.at("e")) == std::vector<double>{0, 1, 2, 0, 1, 2});
  CHECK(f.at("e").dtype() == DType::I64);
  CHECK(values(f.at("o")) == std::vector<double>{12, 13, 14, 15, 16, 17});
  CHECK(f.at("o").dtype() == DType::BF16);
}

TEST_CASE("safetensors: metadata round-trips, text of any kind", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"quotes \"and\" \\backslashes\\", "line1\nline2\ttab"},
      {"unicode", "λ → ∞, 日本語, 🙂"},
      {"empty", ""},
      {"control", std::string("nul\0byte", 8)},
  };
  io::save_safetensors(path, {{"x", ones({2})}}, meta);
  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.metadata == meta);
  CHECK(values(f.at("x")) == std::vector<double>{1, 1});
}

TEST_CASE("safetensors: the file written by Python's safetensors reads exactly", "[io][safetensors][reference]") {
  const std::string path = reference_path("python_written.safetensors");
  const io::SafetensorsFile f = io::load_safetensors(path);
  // The header's order, which the reference writer sorts by element size then name.
  require_same(f.tensors, reference_tensors());
  REQUIRE(f.metadata.size() == 1);
  CHECK_THAT(f.metadata.at("written_by"), Catch::Matchers::StartsWith("tools/reference/gen_safetensors.py"));

  // mixgrad writes the same tensors and metadata as the very same bytes.
  TempDir dir;
  io::save_safetensors(dir.file("again.safetensors"), reference_tensors(), f.metadata);
  CHECK(read_bytes(dir.file("again.safetensors")) == read_bytes(path));
}

// Not run by default: writes the reference tensors (in another order, from non-contiguous views)
// for `tools/reference/gen_safetensors.py check`, the mixgrad -> Python direction (docs/io.md).
TEST_CASE("safetensors: write the interop file for the Python check", "[.interop]") {
  const char* out = std::getenv("MG_IO_INTEROP_DIR");
  const std::string dir = out ? out : ".";
  nn::NamedTensors tensors = reference_tensors();
  std::reverse(tensors.begin(), tensors.end());
  for (auto& [name, t] : tensors) {
    if (t.dim() == 2 && t.numel() > 0) t = t.t().contiguous().t();  // same values, transposed strides
  }
  REQUIRE_FALSE(tensors[3].second.is_contiguous());
  io::save_safetensors(dir + "/mixgrad_written.safetensors", tensors, {{"written_by", "mixgrad test_io"}});
  WARN("wrote " << dir << "/mixgrad_written.safetensors");
}

TEST_CASE("safetensors: every corruption is a clear error naming the file and the tensor", "[io][safetensors][errors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  // Two F32 tensors of 16 bytes each and one BOOL tensor: a [0, 16], b [16, 32], flags [32, 35].
  const nn::NamedTensors tensors = {{"a", from_vector<float>({1, 2, 3, 4})},
                                    {"b", from_vector<float>({5, 6, 7, 8})},
                                    {"flags", from_bits<uint8_t>({1, 0, 1}, {3}, DType::Bool)}};
  auto fresh = [&] { io::save_safetensors(path, tensors, {{"m", "v"}}); };
  fresh();
  REQUIRE(values(io::load_safetensors(path).at("b")) == std::vector<double>{5, 6, 7, 8});
  const std::string good = read_bytes(path);
  const uint64_t n = header_length(good);
  auto error = [&] { return error_of([&] { io::load_safetensors(path); }); };
  auto require_error = [&](const std::string& text) {
    const std::string msg = error();
    INFO("message: " << msg);
    REQUIRE_THAT(msg, Catch::Matchers::StartsWith("load_safetensors: \"" + path + "\""));
    REQUIRE_THAT(msg, Catch::Matchers::Contains(text));
  };

  SECTION("missing file") {
    MG_REQUIRE_ERROR(io::load_safetensors(dir.file("nope.safetensors")), "cannot open");
  }
  SECTION("a directory") {
    MG_REQUIRE_ERROR(io::load_safetensors(dir.file("")), "is not a regular file");
  }
  SECTION("a FIFO is refused before it is opened (the open blocked until a writer came)") {
    const std::string fifo = dir.file("pipe.safetensors");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    MG_REQUIRE_ERROR(io::load_safetensors(fifo), "is not a regular file (a FIFO)");
    MG_REQUIRE_ERROR(io::load_checkpoint(fifo), "is not a regular file (a FIFO)");
    MG_REQUIRE_ERROR(data::read_idx(fifo, 1), "read_idx: '" + fifo + "' is not a regular file (a FIFO)");
    MG_REQUIRE_ERROR(data::WordPiece::load(fifo), "WordPiece::load: '" + fifo + "' is not a regular file");
    ::unlink(fifo.c_str());
  }
  SECTION("file too small") {
    write_bytes(path, good.substr(0, 5));
    require_error("the file has 5 bytes, too few for a safetensors file");
  }
  SECTION("header length beyond the file") {
    std::string b = good;
    const uint64_t big = good.size();
    std::memcpy(b.data(), &big, 8);
    write_bytes(path, b);
    require_error(str_cat("the header length ", big, " (bytes 0-7) exceeds the ", good.size() - 8,
                          " bytes that follow it\n  hint: the file is truncated"));
  }
  SECTION("header length above the 100 MB limit") {
    const uint64_t big = 150'000'000;
    write_bytes(path, std::string(reinterpret_cast<const char*>(&big), 8) + "{}");
    std::filesystem::resize_file(path, 8 + big);  // sparse: costs no disk
    require_error("the header length 150000000 exceeds the limit of 100000000 bytes");
  }
  SECTION("not JSON at all") {
    std::string b = good;
    b[8] = '[';
    write_bytes(path, b);
    require_error("the header does not start with '{'; this is not a safetensors file");
  }
  SECTION("invalid JSON") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"b\":{", "\"b\";{"); });
    require_error("the header is not valid JSON: [json.exception.parse_error");
  }
  SECTION("invalid UTF-8 in the header") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"m\":\"v\"", "\"m\":\"\xff\""); });
    require_error("the header is not valid JSON");
  }
  SECTION("unknown dtype") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"b\":{\"dtype\":\"F32\"", "\"b\":{\"dtype\":\"F8_E4M3\""); });
    require_error("tensor \"b\": unsupported dtype \"F8_E4M3\"; mixgrad reads F64, F32, F16, BF16, I64, I32, U8, BOOL");
  }
  SECTION("dtype that lies about the size") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"b\":{\"dtype\":\"F32\"", "\"b\":{\"dtype\":\"F64\""); });
    require_error("tensor \"b\": shape [4] of F64 needs 32 bytes but data_offsets [16, 32] span 16");
  }
  SECTION("shape that lies") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"a\":{\"dtype\":\"F32\",\"shape\":[4]", "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3]"); });
    require_error("tensor \"a\": shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 16] span 16");
  }
  SECTION("shape whose product overflows") {
    rewrite_header(path, [](std::string& h) {
      replace_once(h, "\"shape\":[4],\"data_offsets\":[0,16]", "\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]");
    });
    require_error("tensor \"a\": shape [4294967296, 4294967296] has more elements than fit in 64 bits");
  }
  SECTION("negative or fractional dimension") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"shape\":[4],\"data_offsets\":[0,16]", "\"shape\":[-4],\"data_offsets\":[0,16]"); });
    require_error("tensor \"a\": shape [-4] has an entry that is not a non-negative 64-bit integer: -4");
    fresh();
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"shape\":[4],\"data_offsets\":[0,16]", "\"shape\":[4.0],\"data_offsets\":[0,16]"); });
    require_error("tensor \"a\": shape [4.0] has an entry");
  }
  SECTION("missing, mistyped and unexpected fields") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"a\":{\"dtype\":\"F32\",", "\"a\":{"); });
    require_error("tensor \"a\": missing field \"dtype\"");
    fresh();
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[0,16]", "\"data_offsets\":[0]"); });
    require_error("tensor \"a\": \"data_offsets\" is [0], expected [begin, end]");
    fresh();
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[0,16]", "\"data_offsets\":[0,16],\"strides\":[1]"); });
    require_error("tensor \"a\": unexpected field \"strides\"");
    fresh();
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"m\":\"v\"", "\"m\":1"); });
    require_error("metadata entry \"m\" is a JSON number; safetensors metadata values are strings");
    fresh();
    rewrite_header(path, [](std::string& h) { replace_once(h, "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", "7"); });
    require_error("tensor \"a\": its header entry is a JSON number");
  }
  SECTION("offsets that end before they begin") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[16,32]", "\"data_offsets\":[32,16]"); });
    require_error("tensor \"b\": data_offsets [32, 16] end before they begin");
  }
  SECTION("truncated data") {
    write_bytes(path, good.substr(0, good.size() - 2));
    require_error("tensor \"flags\": data_offsets [32, 35] reach beyond the data buffer, which has 33 bytes");
    require_error("hint: the file is truncated or its header lies about the offsets");
  }
  SECTION("truncated inside the header") {
    write_bytes(path, good.substr(0, 8 + n / 2));
    require_error("exceeds the");
  }
  SECTION("offsets out of range") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[16,32]", "\"data_offsets\":[116,132]"); });
    require_error("tensor \"b\": data_offsets [116, 132] reach beyond the data buffer, which has 35 bytes");
  }
  SECTION("overlapping tensors") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[16,32]", "\"data_offsets\":[0,16]"); });
    require_error("tensor \"b\": data_offsets [0, 16] overlap those of tensor \"a\" [0, 16]");
  }
  SECTION("a gap in the buffer") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"data_offsets\":[0,16]", "\"data_offsets\":[4,20]"); });
    require_error("bytes [0, 4) of the data buffer belong to no tensor (a gap before tensor \"a\" [4, 20])");
  }
  SECTION("trailing garbage") {
    write_bytes(path, good + "garbage");
    require_error("7 bytes of trailing data after the last tensor (the data buffer has 42 bytes, the tensors cover 35)");
  }
  SECTION("duplicate tensor names") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"b\":{", "\"a\":{"); });
    require_error("the header names \"a\" twice");
  }
  SECTION("duplicate field inside an entry") {
    rewrite_header(path, [](std::string& h) { replace_once(h, "\"b\":{\"dtype\":\"F32\",", "\"b\":{\"dtype\":\"F32\",\"dtype\":\"F32\","); });
    require_error("the entry of \"b\" has the key \"dtype\" twice");
  }
  SECTION("a BOOL byte that is neither 0 nor 1") {
    std::string b = good;
    b[8 + n + 33] = 2;
    write_bytes(path, b);
    require_error("tensor \"flags\": BOOL element 1 has the byte value 2, expected 0 or 1");
  }
}

TEST_CASE("safetensors: invalid tensors and metadata are refused before anything is written", "[io][safetensors][errors]") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  io::save_safetensors(path, {{"old", ones({2})}});
  const std::string before = read_bytes(path);
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{"a", ones({1})}, {"a", ones({1})}}), "tensor name \"a\" appears twice");
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{"", ones({1})}}), "a tensor has an empty name");
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{"__metadata__", ones({1})}}), "\"__metadata__\" is reserved");
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{"u", Tensor()}}), "tensor \"u\" is undefined");
  MG_REQUIRE_ERROR(io::save_safetensors(path, {{std::string("bad\xff"), ones({1})}}), "is not valid UTF-8");
  MG_REQUIRE_ERROR(io::save_safetensors(path, {}, {{"k", "\xc3"}}), "metadata entry \"k\" is not valid UTF-8");
  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"x.safetensors"});
}

TEST_CASE("safetensors: a write that fails part-way leaves the previous file untouched", "[io][safetensors][atomic]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  io::save_safetensors(path, {{"w", from_vector<float>({1, 2, 3})}});
  const std::string before = read_bytes(path);

  SECTION("a tensor that cannot be copied to the CPU, after others were written") {
    if (cuda_backend_present()) {
      WARN("skipped: this build has a CUDA backend, so the stand-in cuda tensor would be copied");
      return;
    }
    // The header and the f64 tensor are written first (largest element size), then the copy fails.
    const std::string msg = error_of([&] {
      io::save_safetensors(path, {{"first", ones({1000}, {.dtype = DType::F64})}, {"gpu", fake_cuda_tensor({4})}});
    });
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::StartsWith("save_safetensors: \"" + path + "\": tensor \"gpu\" ([4] f32 cuda:0) could not be copied to the CPU"));
    CHECK_THAT(msg, Catch::Matchers::EndsWith("\"" + path + "\" was not changed"));
  }
  SECTION("the target is a directory: refused before anything is written") {
    const std::string target = dir.file("a_directory");
    std::filesystem::create_directory(target);
    MG_REQUIRE_ERROR(io::save_safetensors(target, {{"w", ones({3})}}), "\"" + target + "\" is a directory");
    CHECK(std::filesystem::is_directory(target));
    std::filesystem::remove(target);
  }
  SECTION("the directory does not exist") {
    MG_REQUIRE_ERROR(io::save_safetensors(dir.file("no/such/dir.safetensors"), {{"w", ones({3})}}),
                     "cannot create a temporary file next to");
  }
  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});  // no temporary file left
  CHECK(values(io::load_safetensors(path).at("w")) == std::vector<double>{1, 2, 3});
}

TEST_CASE("safetensors: saving over a file keeps its permissions, writes through a symlink, fits any name",
          "[io][safetensors][atomic]") {
  namespace fs = std::filesystem;
  TempDir dir;
  // A private file stays private (torch.save and safetensors' save_file write in place).
  const std::string path = dir.file("private.safetensors");
  io::save_safetensors(path, {{"w", ones({3})}});
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  io::save_safetensors(path, {{"w", full({3}, 2.0)}});
  CHECK(fs::status(path).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(values(io::load_safetensors(path).at("w")) == std::vector<double>{2, 2, 2});
  // A symlink stays a symlink; the file it names gets the new contents.
  const std::string target = dir.file("target.safetensors"), link = dir.file("link.safetensors");
  io::save_safetensors(target, {{"w", ones({2})}});
  fs::create_symlink(target, link);
  io::save_safetensors(link, {{"w", full({2}, 5.0)}});
  CHECK(fs::is_symlink(link));
  CHECK(values(io::load_safetensors(target).at("w")) == std::vector<double>{5, 5});
  // A relative link is resolved from its own directory.
  const std::string rel = dir.file("rel.safetensors");
  fs::create_symlink("target.safetensors", rel);
  io::save_safetensors(rel, {{"w", full({2}, 6.0)}});
  CHECK(fs::is_symlink(rel));
  CHECK(values(io::load_safetensors(target).at("w")) == std::vector<double>{6, 6});
  // The temporary name does not grow with the target's: a 250-character name saves.
  const std::string long_name = dir.file(std::string(240, 'n') + ".safetensors");
  io::save_safetensors(long_name, {{"w", ones({1})}});
  CHECK(values(io::load_safetensors(long_name).at("w")) == std::vector<double>{1});
  CHECK(dir.entries().size() == 5);  // no temporary file left
}

TEST_CASE("safetensors: saving over an existing file replaces it", "[io][safetensors][atomic]") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  io::save_safetensors(path, {{"w", ones({100})}});
  io::save_safetensors(path, {{"v", full({2}, 7.0)}});
  const io::SafetensorsFile f = io::load_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(values(f.at("v")) == std::vector<double>{7, 7});
  CHECK(dir.entries() == std::vector<std::string>{"m.safetensors"});
  // A directory is refused before anything is written (it was written in full, then the rename
  // failed with a message that named the temporary file as the target).
  std::filesystem::create_directory(dir.file("d"));
  MG_REQUIRE_ERROR(io::save_safetensors(dir.file("d"), {{"w", ones({100})}}), "is a directory");
  CHECK(dir.entries() == std::vector<std::string>{"d", "m.safetensors"});
}
