// Tests of the EC02 container (data/text/ec02.h): the header of Debian's bible.data, our encoder
// reproducing that file byte for byte, round trips through every code width, the KwKwK case and
// full dictionaries, and clear errors (never a crash) on truncated or corrupted files.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "data/text/ec02.h"
#include "test_util.h"
#include "text_fixture.h"

using namespace mg::data;
using mg::test::text::read_bytes;
using mg::test::text::TempDir;
using mg::test::text::write_bytes;

namespace {

std::string random_text(std::size_t n, uint32_t seed, int alphabet = 256) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() % uint32_t(alphabet));
  return s;
}

void put_be32(std::string& b, std::size_t at, uint32_t v) {
  for (int k = 0; k < 4; ++k) b[at + std::size_t(k)] = char(v >> (24 - 8 * k));
}

}  // namespace

TEST_CASE("ec02: header of Debian's bible.data", "[data]") {
  MG_REQUIRE_KJV();
  const std::string bytes = read_bytes(kjv_default_path());
  const Ec02Header h = ec02_parse_header(bytes, "bible.data");
  CHECK(h.title == "Compressed Data File");
  CHECK(h.window_size == 65536);
  CHECK(h.num_windows() == 68);
  CHECK(h.offsets.front() == 0x5c + 4 * 69 + 3);  // after the table and the 1f 9d 90 header
  CHECK(h.offsets.back() == bytes.size());
  CHECK(h.max_bits == 16);
  const std::string text = ec02_decompress(bytes, "bible.data");
  CHECK(text.size() == 67u * 65536u + 13563u);
  CHECK(text.substr(0, 62) == "Holy Bible, Authorized (King James) Version.  Textfile 930105.");
  // Windows decode independently: window 1 alone equals bytes [65536, 131072) of the whole.
  CHECK(ec02_decompress_window(bytes, h, 1, "bible.data") == text.substr(65536, 65536));
}

TEST_CASE("ec02: the encoder reproduces Debian's bible.data byte for byte", "[data]") {
  // Strong evidence the format is understood: classic compress with one CLEAR per 64 KiB window
  // re-creates the packaged file exactly (padding after each CLEAR included).
  MG_REQUIRE_KJV();
  const std::string bytes = read_bytes(kjv_default_path());
  const std::string text = ec02_decompress(bytes, "bible.data");
  const std::string again = ec02_compress(text, 65536, "Compressed Data File", 16);
  CHECK(again.size() == bytes.size());
  CHECK(again == bytes);
}

TEST_CASE("ec02: round trips across window sizes and code widths", "[data]") {
  struct Case {
    std::string text;
    uint32_t window;
    int max_bits;
  };
  std::vector<Case> cases = {
      {"a", 65536, 16},
      {"ab", 1, 16},                                   // one byte per window
      {std::string(100000, 'a'), 65536, 16},           // KwKwK codes all the way
      {"abababababababababababab", 5, 16},
      {random_text(70000, 1), 65536, 16},              // incompressible: widths 9..16, 2 windows
      {random_text(200000, 2), 200000, 12},            // dictionary full at 4096 entries
      {random_text(200000, 3), 200000, 9},             // 9-bit codes only
      {random_text(50000, 4, 4), 7777, 16},            // small alphabet, odd window, long codes
      {random_text(300000, 5, 30), 65536, 16},         // 5 windows, the last partial
  };
  for (const Case& c : cases) {
    INFO("size " << c.text.size() << " window " << c.window << " bits " << c.max_bits);
    const std::string file = ec02_compress(c.text, c.window, "t", c.max_bits);
    const Ec02Header h = ec02_parse_header(file, "t");
    CHECK(h.num_windows() == (c.text.size() + c.window - 1) / c.window);
    CHECK(h.max_bits == c.max_bits);
    CHECK(ec02_decompress(file, "t") == c.text);
  }
}

TEST_CASE("ec02: the encoder compresses text like compress does", "[data]") {
  // 64 KiB of repetitive English shrinks to under a quarter; random bytes grow by < 50% (most
  // codes carry one byte in 10..16 bits).
  const std::string english = [] {
    std::string s;
    while (s.size() < 65536) s += "And God said, Let there be light: and there was light. ";
    return s.substr(0, 65536);
  }();
  CHECK(ec02_compress(english).size() < english.size() / 4);
  const std::string noise = random_text(65536, 9);
  CHECK(ec02_compress(noise).size() < noise.size() * 15 / 10);
}

TEST_CASE("ec02: header errors", "[data]") {
  const std::string good = ec02_compress(random_text(3000, 7, 20), 1000, "t");
  MG_REQUIRE_ERROR(ec02_decompress(good.substr(0, 10), "f"), "shorter than the 92-byte header");
  std::string b = good;
  b[0] = 'X';
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "bad magic number");
  b = good;
  b[3] = '3';
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "wrong version '03'");
  b = good;
  put_be32(b, 0x54, 0);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "window size 0 is outside");
  b = good;
  put_be32(b, 0x58, 0);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "holds 0 windows");
  b = good;
  put_be32(b, 0x58, 1000000);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "offset table of 1000000 windows ends at byte");
  b = good;
  put_be32(b, 0x5c + 4, 0x10);  // window 1 starts inside the header
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "empty or reversed");
  b = good;
  put_be32(b, 0x5c, 0x10);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "inside the header");
  b = good;
  b[0x5c + 4 * 4 + 2] = char(0x91);  // compress header: 17-bit codes
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "compressed with 17-bit codes");
  b = good;
  b[0x5c + 4 * 4 + 2] = char(0x10);  // not block mode
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "not in block mode");
  // Truncation anywhere: inside the table, inside the data, one byte short.
  for (std::size_t n : {std::size_t(0x5c), std::size_t(0x60), good.size() / 2, good.size() - 1}) {
    INFO("truncated to " << n << " bytes");
    MG_REQUIRE_ERROR(ec02_decompress(good.substr(0, n), "f"), "(truncated?)");
  }
  MG_REQUIRE_ERROR(ec02_read_file("/nonexistent/bible.data"), "cannot open it for reading");
}

TEST_CASE("ec02: a header that claims a huge text reserves nothing before its windows decode", "[data]") {
  // 200,000 windows of 2^26 bytes in a 1.2 MB file: reserving window size x windows up front
  // threw std::bad_alloc; now window 0 (2 bytes cannot decode to 2^26) is the named error.
  const uint32_t windows = 200000;
  const std::size_t table_end = 92 + 4 * (std::size_t(windows) + 1);
  std::string b(table_end + 2 * std::size_t(windows), 'A');
  b.replace(0, 4, "EC02");
  put_be32(b, 0x54, 1u << 26);
  put_be32(b, 0x58, windows);
  for (uint32_t i = 0; i <= windows; ++i) put_be32(b, 0x5c + 4 * std::size_t(i), uint32_t(table_end + 2 * std::size_t(i)));
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "EC02 file 'f': window 0");
}

TEST_CASE("ec02: corrupted windows are reported, never decoded past their bounds", "[data]") {
  const std::string text = random_text(20000, 11, 40);
  const std::string good = ec02_compress(text, 4096, "t");
  const Ec02Header h = ec02_parse_header(good, "t");
  const std::size_t w2 = h.offsets[2], w2_end = h.offsets[3];
  // All-ones codes point far beyond the dictionary.
  std::string b = good;
  for (std::size_t i = w2 + 8; i < w2 + 40; ++i) b[i] = char(0xff);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "window 2 of 5");
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "is beyond the dictionary");
  // Zero codes are literals of one byte: the window comes out short.
  b = good;
  for (std::size_t i = w2 + 8; i < w2_end; ++i) b[i] = 0;
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "instead of the window size 4096");
  // A window that does not start with a literal.
  b = good;
  b[w2] = char(0xff);
  b[w2 + 1] = char(0xff);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "where a literal byte (0..255) must start");
  // A header claiming smaller windows than were written: window 0 overflows it.
  b = good;
  put_be32(b, 0x54, 2048);
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "window 0 of 5");
  MG_REQUIRE_ERROR(ec02_decompress(b, "f"), "more than the window size 2048");

  // Random corruption: every outcome is either the exact text or an mg::Error (ASan checks the
  // rest). Each byte flip lands in the data of some window.
  std::mt19937 rng(123);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string c = good;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = h.offsets[0] + rng() % (good.size() - h.offsets[0]);
      c[at] = char(uint8_t(c[at]) ^ uint8_t(1 + rng() % 255));
    }
    try {
      const std::string out = ec02_decompress(c, "f");
      CHECK(out.size() <= std::size_t(h.window_size) * h.num_windows());
    } catch (const mg::Error&) {
      ++errors;
    }
  }
  CHECK(errors > 200);  // most corruptions are caught by the code or size checks (measured: 241)
}

// ec02_decompress_window takes a public header struct: fields a caller changed are refused
// before anything is sized from them (max_bits 4 gave a 16-entry dictionary that the 256
// single-byte entries overflowed).
TEST_CASE("ec02: a window is not decoded with a header ec02_parse_header would refuse", "[data]") {
  const std::string good = ec02_compress(random_text(9000, 3, 40), 4096, "t");
  const Ec02Header h = ec02_parse_header(good, "t");
  CHECK(!ec02_decompress_window(good, h, 0, "t").empty());
  Ec02Header bad = h;
  bad.max_bits = 4;
  MG_REQUIRE_ERROR(ec02_decompress_window(good, bad, 0, "t"), "max_bits 4 is outside 9..16");
  bad = h;
  bad.max_bits = 40;
  MG_REQUIRE_ERROR(ec02_decompress_window(good, bad, 0, "t"), "max_bits 40 is outside 9..16");
  bad = h;
  bad.window_size = 0;
  MG_REQUIRE_ERROR(ec02_decompress_window(good, bad, 0, "t"), "window size 0 is outside");
  bad = h;
  bad.offsets[1] = uint32_t(good.size() + 100);
  MG_REQUIRE_ERROR(ec02_decompress_window(good, bad, 0, "t"), "beyond the");
  bad = h;
  bad.offsets[1] = bad.offsets[0];
  MG_REQUIRE_ERROR(ec02_decompress_window(good, bad, 0, "t"), "which is empty, reversed");
}

TEST_CASE("ec02: compress argument errors", "[data]") {
  MG_REQUIRE_ERROR(ec02_compress("", 10), "the text is empty");
  MG_REQUIRE_ERROR(ec02_compress("abc", 0), "window_size must be in 1..");
  MG_REQUIRE_ERROR(ec02_compress("abc", 10, "t", 17), "max_bits must be in 9..16");
  MG_REQUIRE_ERROR(ec02_compress("abc", 10, std::string(80, 'x')), "the title has 80 bytes");
}
