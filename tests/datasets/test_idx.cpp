// IDX reader/writer: round trips of tiny files written here (plain and gzip'ed), and every kind of
// malformed file (bad magic, wrong element type, truncated header or data, extra data, zero or
// absurd dimensions, a truncated or corrupt gzip stream) rejected with an error naming the file.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "data/idx.h"
#include "datasets/datasets_fixture.h"
#include "test_util.h"

namespace fs = std::filesystem;
using mg::data::read_idx;
using mg::data::write_idx;
using mg::test::datasets::read_bytes;
using mg::test::datasets::TempDir;
using mg::test::datasets::write_bytes;

namespace {

// An IDX header: magic then big-endian dims.
std::vector<uint8_t> header(uint32_t magic, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out;
  const auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
  };
  be32(magic);
  for (uint32_t d : dims) be32(d);
  return out;
}

// bytes gzip'ed into `path` (zlib's gz* API, as gzip(1) would write them).
void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<uint8_t> pattern(std::size_t n) {
  std::vector<uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 37 + 11) % 256);
  return v;
}

}  // namespace

TEST_CASE("idx: tiny files round-trip, plain and gzip'ed", "[data][idx]") {
  TempDir dir;
  const std::vector<uint8_t> images = pattern(3 * 4 * 5);  // [3, 4, 5]
  const std::vector<uint8_t> labels = {7, 0, 255};         // [3]
  for (const bool gzip : {false, true}) {
    INFO("gzip " << gzip);
    const std::string ipath = dir.file(gzip ? "images.gz" : "images");
    const std::string lpath = dir.file(gzip ? "labels.gz" : "labels");
    write_idx(ipath, {3, 4, 5}, images, gzip);
    write_idx(lpath, {3}, labels, gzip);

    const std::vector<uint8_t> raw = read_bytes(ipath);
    if (gzip) {
      REQUIRE(raw.size() >= 2);
      CHECK(raw[0] == 0x1f);  // gzip magic
      CHECK(raw[1] == 0x8b);
    } else {
      // Magic 0x00000803, dims 3, 4, 5 big-endian, then the bytes as given.
      std::vector<uint8_t> want = header(0x00000803, {3, 4, 5});
      want.insert(want.end(), images.begin(), images.end());
      CHECK(raw == want);
    }

    const mg::data::IdxArray im = read_idx(ipath, 3);
    CHECK(im.dims == std::vector<int64_t>{3, 4, 5});
    CHECK(im.data == images);
    const mg::data::IdxArray lb = read_idx(lpath, 1);
    CHECK(lb.dims == std::vector<int64_t>{3});
    CHECK(lb.data == labels);
  }
}

TEST_CASE("idx: a larger gzip'ed file round-trips across read chunks", "[data][idx]") {
  TempDir dir;
  const std::vector<uint8_t> data = pattern(std::size_t(3) << 23);  // 24 MiB > one 16 MiB chunk
  write_idx(dir.file("big.gz"), {3, 1 << 12, 1 << 11}, data, true);
  const mg::data::IdxArray a = read_idx(dir.file("big.gz"), 3);
  CHECK(a.dims == std::vector<int64_t>{3, 4096, 2048});
  CHECK((a.data == data));  // parenthesised: no 24 MiB printout
}

TEST_CASE("idx: a bad magic is rejected with the expected and the found value", "[data][idx]") {
  TempDir dir;
  const std::string labels = dir.file("labels");
  write_idx(labels, {4}, {1, 2, 3, 4}, false);
  // A labels file where images are expected (and the reverse).
  MG_REQUIRE_ERROR(read_idx(labels, 3), "expected magic 0x00000803 (u8, 3 dimensions), got 0x00000801 (u8, 1 dimension)");
  MG_REQUIRE_ERROR(read_idx(labels, 3), labels);
  write_idx(dir.file("images"), {1, 2, 2}, {1, 2, 3, 4}, false);
  MG_REQUIRE_ERROR(read_idx(dir.file("images"), 1), "expected magic 0x00000801 (u8, 1 dimension), got 0x00000803");

  // Another element type: f32 (0x0D).
  std::vector<uint8_t> f32 = header(0x00000D01, {1});
  f32.insert(f32.end(), {0, 0, 0, 0});
  write_bytes(dir.file("f32"), f32);
  MG_REQUIRE_ERROR(read_idx(dir.file("f32"), 1), "got 0x00000d01 (f32, 1 dimension)");

  // Not an IDX file at all (a PNG signature).
  write_bytes(dir.file("png"), {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a});
  MG_REQUIRE_ERROR(read_idx(dir.file("png"), 1), "got 0x89504e47 (not an IDX magic");

  // A gzip'ed file with a bad magic is read through zlib and rejected the same way.
  write_idx(dir.file("labels.gz"), {4}, {1, 2, 3, 4}, true);
  MG_REQUIRE_ERROR(read_idx(dir.file("labels.gz"), 3), "got 0x00000801");
}

TEST_CASE("idx: truncated or extra data and short headers are rejected", "[data][idx]") {
  TempDir dir;
  const std::string path = dir.file("images");

  std::vector<uint8_t> truncated = header(0x00000803, {2, 3, 4});  // needs 24 bytes
  const std::vector<uint8_t> body = pattern(23);
  truncated.insert(truncated.end(), body.begin(), body.end());
  write_bytes(path, truncated);
  MG_REQUIRE_ERROR(read_idx(path, 3), "truncated: dims [2, 3, 4] need 24 data bytes but the file holds 23");
  MG_REQUIRE_ERROR(read_idx(path, 3), path);

  std::vector<uint8_t> extra = header(0x00000803, {2, 3, 4});
  const std::vector<uint8_t> body25 = pattern(25);
  extra.insert(extra.end(), body25.begin(), body25.end());
  write_bytes(path, extra);
  MG_REQUIRE_ERROR(read_idx(path, 3), "extra data: dims [2, 3, 4] need 24 data bytes but the file holds more (1 bytes more)");

  // Wrong counts: a label file whose header says 5 labels but holds 3.
  std::vector<uint8_t> labels = header(0x00000801, {5});
  labels.insert(labels.end(), {1, 2, 3});
  write_bytes(path, labels);
  MG_REQUIRE_ERROR(read_idx(path, 1), "dims [5] need 5 data bytes but the file holds 3");

  // The header itself cut short: 2 of 3 dims.
  write_bytes(path, header(0x00000803, {2, 3}));
  MG_REQUIRE_ERROR(read_idx(path, 3), "the header ends after 8 of the 12 bytes of its 3 dimensions");

  write_bytes(path, {0, 0});
  MG_REQUIRE_ERROR(read_idx(path, 1), "the file has 2 bytes, too short for an IDX magic number");
  write_bytes(path, {});
  MG_REQUIRE_ERROR(read_idx(path, 1), "the file has 0 bytes");
}

TEST_CASE("idx: zero and absurd dimensions are rejected", "[data][idx]") {
  TempDir dir;
  const std::string path = dir.file("images");
  write_bytes(path, header(0x00000803, {2, 0, 4}));
  MG_REQUIRE_ERROR(read_idx(path, 3), "dimension 1 is 0 (dims [2, 0])");
  // 2^32-1 cubed: a corrupt header must not make the reader allocate it.
  write_bytes(path, header(0x00000803, {0xffffffffu, 0xffffffffu, 0xffffffffu}));
  MG_REQUIRE_ERROR(read_idx(path, 3), "describe more than 2^40 bytes");
  // Large but possible dims with a tiny file: truncated, found without allocating 1 TiB.
  write_bytes(path, header(0x00000803, {1u << 16, 1u << 12, 1u << 10}));
  MG_REQUIRE_ERROR(read_idx(path, 3), "but the file holds 0");
}

TEST_CASE("idx: a truncated or corrupt gzip stream is an error, not short data", "[data][idx]") {
  TempDir dir;
  const std::string path = dir.file("images.gz");
  const std::vector<uint8_t> data = pattern(64 * 64 * 16);
  write_idx(path, {16, 64, 64}, data, true);
  const auto full = fs::file_size(path);
  fs::resize_file(path, full / 2);
  MG_REQUIRE_ERROR(read_idx(path, 3), "the gzip stream is truncated");
  MG_REQUIRE_ERROR(read_idx(path, 3), path);

  write_idx(path, {16, 64, 64}, data, true);
  std::vector<uint8_t> bytes = read_bytes(path);
  for (std::size_t i = 20; i < bytes.size() - 20; i += 7) bytes[i] ^= 0x5a;  // scramble the deflate data
  write_bytes(path, bytes);
  const std::string msg = mg::test::error_of([&] { read_idx(path, 3); });
  INFO(msg);
  CHECK(msg.find("read_idx: " + path) == 0);  // whatever zlib detects first, the file is named
}

TEST_CASE("idx: bytes after the gzip stream are extra data, as in a plain file", "[data][idx][errors]") {
  // zlib's gzread ignores what follows the last gzip member; the stream's size field then is not
  // where the file ends.
  TempDir dir;
  const std::string path = dir.file("labels.gz");
  write_idx(path, {5}, {1, 2, 3, 4, 5}, true);
  REQUIRE(read_idx(path, 1).data.size() == 5);
  std::vector<uint8_t> bytes = read_bytes(path);
  for (const char c : std::string("GARBAGE")) bytes.push_back(uint8_t(c));
  write_bytes(path, bytes);
  MG_REQUIRE_ERROR(read_idx(path, 1), "extra data after the gzip stream");
}

TEST_CASE("idx: missing files and bad writer arguments", "[data][idx]") {
  TempDir dir;
  MG_REQUIRE_ERROR(read_idx(dir.file("nope.gz"), 1), "read_idx: cannot open " + dir.file("nope.gz"));
  MG_REQUIRE_ERROR(read_idx(dir.file("nope.gz"), 0), "ndim must be in [1, 8], got 0");
  MG_REQUIRE_ERROR(write_idx(dir.file("w"), {2, 3}, {1, 2, 3}, false), "dims [2, 3] need 6 bytes but 3 were given");
  MG_REQUIRE_ERROR(write_idx(dir.file("w"), {2, 0}, {}, false), "every dimension must be in [1, 2^32)");
  // 2^16 four times is 2^64, which wrapped to 0 and "matched" empty data
  MG_REQUIRE_ERROR(write_idx(dir.file("w"), {65536, 65536, 65536, 65536}, {}, false), "describe more than 2^40 bytes");
  MG_REQUIRE_ERROR(write_idx((dir.path / "no_such_dir" / "w").string(), {1}, {1}, true), "write_idx: cannot create");
}

TEST_CASE("idx: the inflated size is bounded by what the header and the file size allow", "[data][idx][errors]") {
  TempDir dir;
  const std::string path = dir.file("labels.gz");
  // A gzip'ed label file whose header claims 2^30 labels and holds 100: refused from the file size
  // (a gzip stream inflates at most 1032:1) before a byte of data is inflated.
  std::vector<uint8_t> bytes = header(0x00000801, {1u << 30});
  bytes.resize(bytes.size() + 100, 7);
  write_gzip(path, bytes);
  const auto gz_size = fs::file_size(path);
  MG_REQUIRE_ERROR(read_idx(path, 1), mg::str_cat("read_idx: ", path, ": truncated: dims [1073741824] need 1073741824 data bytes but a gzip file of ",
                                                  gz_size, " bytes inflates to at most ", gz_size * 1040));

  // The bomb: 1 MiB of zeros (about 1 KB gzip'ed) under a header claiming 1 GiB. The
  // ratio bound refuses it without inflating anything; it took a 1 GiB read before.
  bytes = header(0x00000801, {1u << 30});
  bytes.resize(bytes.size() + (1u << 20), 0);
  write_gzip(path, bytes);
  const auto start = std::chrono::steady_clock::now();
  MG_REQUIRE_ERROR(read_idx(path, 1), "bytes inflates to at most");
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);

  // Within the ratio the reader inflates only up to the count the dims give, then one chunk more:
  // 64 KiB of data with 1 MiB of zeros behind it is extra data, found without reading it all.
  bytes = header(0x00000801, {1u << 16});
  bytes.resize(bytes.size() + (1u << 16) + (1u << 20), 0);
  write_gzip(path, bytes);
  MG_REQUIRE_ERROR(read_idx(path, 1), "extra data: dims [65536] need 65536 data bytes but the file holds more");

  // Plain files are checked against their size before any data is read.
  const std::string plain = dir.file("labels");
  std::vector<uint8_t> p = header(0x00000801, {1u << 30});
  p.resize(p.size() + 100, 7);
  write_bytes(plain, p);
  MG_REQUIRE_ERROR(read_idx(plain, 1), "truncated: dims [1073741824] need 1073741824 data bytes but the file holds 100");
}

TEST_CASE("idx: every truncation of a valid file is a named error", "[data][idx][errors]") {
  TempDir dir;
  for (const bool gz : {false, true}) {
    const std::string path = dir.file(gz ? "images.gz" : "images");
    write_idx(path, {3, 4, 5}, pattern(60), gz);
    const std::vector<uint8_t> good = read_bytes(path);
    for (std::size_t len = 0; len < good.size(); ++len) {
      write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(len)));
      INFO((gz ? "gzip'ed" : "plain") << " file cut to " << len << " of " << good.size() << " bytes");
      const std::string msg = mg::test::error_of([&] { read_idx(path, 3); });
      REQUIRE_THAT(msg, Catch::Matchers::StartsWith("read_idx: " + path + ": "));
    }
  }
}
