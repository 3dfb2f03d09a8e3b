// Tests of the KJV reader (data/text/kjv.h): counts, first and last verses, book names and
// per-book verse counts, agreement with the `bible` program, the MG_KJV_PATH override and clear
// errors for missing, truncated, corrupted and malformed files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "data/text/ec02.h"
#include "data/text/kjv.h"
#include "test_util.h"
#include "text_fixture.h"

using namespace mg::data;
using mg::test::text::kjv;
using mg::test::text::read_bytes;
using mg::test::text::TempDir;
using mg::test::text::write_bytes;

namespace {

// Sets an environment variable for a scope and restores the previous value.
struct EnvGuard {
  std::string name;
  bool had = false;
  std::string old;
  EnvGuard(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) {
      had = true;
      old = v;
    }
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~EnvGuard() {
    if (had) {
      ::setenv(name.c_str(), old.c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

}  // namespace

TEST_CASE("kjv: 31,102 verses, first and last", "[data]") {
  MG_REQUIRE_KJV();
  const auto& v = kjv();
  REQUIRE(v.size() == 31102);
  CHECK(v.front().book == 0);
  CHECK(v.front().book_name == "Genesis");
  CHECK(v.front().chapter == 1);
  CHECK(v.front().verse == 1);
  CHECK(v.front().text == "In the beginning God created the heaven and the earth.");
  CHECK(v.back().book == 65);
  CHECK(v.back().book_name == "Revelation");
  CHECK(v.back().chapter == 22);
  CHECK(v.back().verse == 21);
  CHECK(v.back().text == "The grace of our Lord Jesus Christ be with you all. Amen.");
  // The text is kept byte for byte, including the file's double spaces and a trailing one.
  const auto josh = std::find_if(v.begin(), v.end(), [](const Verse& x) {
    return x.book == 5 && x.chapter == 7 && x.verse == 2;
  });
  REQUIRE(josh != v.end());
  CHECK(josh->text.find("Go up and view the country.  And the men") != std::string::npos);
}

TEST_CASE("kjv: 66 books with canonical names and verse counts", "[data]") {
  MG_REQUIRE_KJV();
  const auto& v = kjv();
  std::map<int, int> per_book;
  std::map<int, int> chapters;
  for (const Verse& x : v) {
    ++per_book[x.book];
    chapters[x.book] = std::max(chapters[x.book], x.chapter);
    REQUIRE(x.book_name == kjv_book_names()[std::size_t(x.book)]);
  }
  REQUIRE(per_book.size() == 66);
  CHECK(kjv_book_names()[0] == "Genesis");
  CHECK(kjv_book_names()[8] == "1 Samuel");
  CHECK(kjv_book_names()[21] == "Song of Solomon");
  CHECK(kjv_book_names()[38] == "Malachi");
  CHECK(kjv_book_names()[39] == "Matthew");
  CHECK(kjv_book_names()[65] == "Revelation");
  // Verse counts of the standard KJV versification.
  CHECK(per_book[0] == 1533);   // Genesis
  CHECK(per_book[18] == 2461);  // Psalms
  CHECK(per_book[30] == 21);    // Obadiah
  CHECK(per_book[39] == 1071);  // Matthew
  CHECK(per_book[63] == 14);    // 3 John
  CHECK(per_book[65] == 404);   // Revelation
  CHECK(chapters[0] == 50);
  CHECK(chapters[18] == 150);
  CHECK(chapters[65] == 22);
  int psalm119 = 0, old_testament = 0;
  for (const Verse& x : v) {
    psalm119 += x.book == 18 && x.chapter == 119;
    old_testament += !kjv_is_new_testament(x.book);
  }
  CHECK(psalm119 == 176);
  CHECK(old_testament == 23145);
  CHECK(int(v.size()) - old_testament == 7957);
}

TEST_CASE("kjv: every verse matches the bible program's output", "[data]") {
  MG_REQUIRE_KJV();
  if (!std::filesystem::exists("/usr/bin/bible") || std::getenv("MG_KJV_PATH")) {
    WARN("skipped: /usr/bin/bible (package bible-kjv) is not installed, or MG_KJV_PATH is set");
    return;
  }
  FILE* p = ::popen("/usr/bin/bible -f Gen1:1-Rev22:21 2>/dev/null", "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  std::string ours;
  for (const Verse& x : kjv()) {
    ours += std::string(kjv_book_abbreviations()[std::size_t(x.book)]) + std::to_string(x.chapter) + ":" +
            std::to_string(x.verse) + " " + x.text + "\n";
  }
  CHECK(out.size() == ours.size());
  CHECK(out == ours);
}

TEST_CASE("kjv: missing file and MG_KJV_PATH", "[data]") {
  MG_REQUIRE_ERROR(read_kjv("/nonexistent/bible.data"), "apt-get install bible-kjv-text");
  {
    EnvGuard env("MG_KJV_PATH", "/nonexistent/from_env.data");
    CHECK(kjv_default_path() == "/nonexistent/from_env.data");
    MG_REQUIRE_ERROR(read_kjv(), "'/nonexistent/from_env.data' does not exist or is not a file (from MG_KJV_PATH)");
  }
  {
    EnvGuard env("MG_KJV_PATH", "");
    CHECK(kjv_default_path() == kKjvDefaultPath);
  }
  // A small corpus in the same format, found through the environment variable.
  TempDir dir;
  const std::string text =
      "Holy Bible, a test.\nGe1:1 In the beginning.\nGe1:2 And the earth.\n1Sm3:4 That the LORD called Samuel:\n"
      "Rev22:21 The grace. Amen.\n";
  write_bytes(dir.file("mini.data"), ec02_compress(text, 40));
  EnvGuard env("MG_KJV_PATH", dir.file("mini.data"));
  const auto v = read_kjv();
  REQUIRE(v.size() == 4);
  CHECK(v[2].book == 8);
  CHECK(v[2].book_name == "1 Samuel");
  CHECK(v[2].chapter == 3);
  CHECK(v[2].verse == 4);
  CHECK(v[2].text == "That the LORD called Samuel:");
  CHECK(v[3].book_name == "Revelation");
}

TEST_CASE("kjv: truncated and corrupted copies of bible.data give clear errors", "[data]") {
  MG_REQUIRE_KJV();
  const std::string good = read_bytes(kjv_default_path());
  const Ec02Header h = ec02_parse_header(good, "bible.data");
  TempDir dir;
  auto read_copy = [&](const std::string& name, const std::string& bytes) {
    write_bytes(dir.file(name), bytes);
    return read_kjv(dir.file(name));
  };
  MG_REQUIRE_ERROR(read_copy("empty", ""), "shorter than the 92-byte header");
  MG_REQUIRE_ERROR(read_copy("header", good.substr(0, 200)), "(truncated?)");
  MG_REQUIRE_ERROR(read_copy("half", good.substr(0, good.size() / 2)), "(truncated?)");
  MG_REQUIRE_ERROR(read_copy("short1", good.substr(0, good.size() - 1)), "window 67 ends at byte 1740565");
  std::string b = good;
  b.replace(0, 4, "GIF8");
  MG_REQUIRE_ERROR(read_copy("magic", b), "bad magic number");
  // Garbage codes inside window 30.
  b = good;
  for (std::size_t i = h.offsets[30] + 100; i < h.offsets[30] + 200; ++i) b[i] = char(0xff);
  MG_REQUIRE_ERROR(read_copy("garbage", b), "window 30 of 68");
  // Zeroed codes: window 30 decodes short.
  b = good;
  for (std::size_t i = h.offsets[30] + 100; i < h.offsets[31]; ++i) b[i] = 0;
  MG_REQUIRE_ERROR(read_copy("zeros", b), "bytes instead of the window size 65536");
  // A valid container around text that is not the Bible's line format.
  MG_REQUIRE_ERROR(read_copy("notkjv", ec02_compress("title\nGe1:1 ok\nhello world\n")), "line 3 \"hello world\"");
}

TEST_CASE("kjv: parser errors name the line", "[data]") {
  CHECK(parse_kjv_text("T\nGe1:1 a\nGe1:2 b").size() == 2);  // no final newline needed
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe1:1 a\nXyz1:2 b\n"), "line 3 \"Xyz1:2 b\": unknown book abbreviation 'Xyz'");
  // A damaged first verse line is an error, not a title line (it would drop Genesis 1:1 silently).
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGf1:1 In the beginning\nGe1:2 b\n"), "line 2 \"Gf1:1 In the beginning\": unknown book abbreviation 'Gf'");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nExo1:1 a\nGe1:2 b\n"), "Genesis after Exodus: books out of canonical order");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe1:2 a\nGe1:2 b\n"), "Genesis 1:2 does not follow Genesis 1:2");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe2:1 a\nGe1:9 b\n"), "Genesis 1:9 does not follow Genesis 2:1");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe1:1 a\nGe1:x b\n"), "not a verse line");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe1:1 a\nGe1:2\n"), "not a verse line");
  MG_REQUIRE_ERROR(parse_kjv_text("T\nGe1:1 a\nGe12345:1 b\n"), "not a verse line");
  MG_REQUIRE_ERROR(parse_kjv_text("title only\n", "x.data"), "read_kjv: 'x.data' holds no verse lines");
  MG_REQUIRE_ERROR(parse_kjv_text(std::string("T\nGe1:1 a\n\x01\x02\n", 14)), "line 3 \"??\"");
}
