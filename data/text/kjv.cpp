// KJV verse reader: EC02 decompression (data/text/ec02.cpp) and a strict line parser.
#include "mixgrad/data/text/kjv.h"

#include <cstdlib>
#include <filesystem>
#include <unordered_map>

#include "mixgrad/core/error.h"
#include "mixgrad/data/text/ec02.h"

namespace mg::data {
namespace {

constexpr std::array<std::string_view, kKjvNumBooks> kNames = {
    "Genesis",       "Exodus",          "Leviticus",       "Numbers",         "Deuteronomy",
    "Joshua",        "Judges",          "Ruth",            "1 Samuel",        "2 Samuel",
    "1 Kings",       "2 Kings",         "1 Chronicles",    "2 Chronicles",    "Ezra",
    "Nehemiah",      "Esther",          "Job",             "Psalms",          "Proverbs",
    "Ecclesiastes",  "Song of Solomon", "Isaiah",          "Jeremiah",        "Lamentations",
    "Ezekiel",       "Daniel",          "Hosea",           "Joel",            "Amos",
    "Obadiah",       "Jonah",           "Micah",           "Nahum",           "Habakkuk",
    "Zephaniah",     "Haggai",          "Zechariah",       "Malachi",         "Matthew",
    "Mark",          "Luke",            "John",            "Acts",            "Romans",
    "1 Corinthians", "2 Corinthians",   "Galatians",       "Ephesians",       "Philippians",
    "Colossians",    "1 Thessalonians", "2 Thessalonians", "1 Timothy",       "2 Timothy",
    "Titus",         "Philemon",        "Hebrews",         "James",           "1 Peter",
    "2 Peter",       "1 John",          "2 John",          "3 John",          "Jude",
    "Revelation"};

// The abbreviations of the bible-kjv-text file, in canonical order.
constexpr std::array<std::string_view, kKjvNumBooks> kAbbrevs = {
    "Ge",   "Exo",  "Lev",  "Num",  "Deu",  "Josh", "Jdgs", "Ruth",  "1Sm",  "2Sm",  "1Ki",
    "2Ki",  "1Chr", "2Chr", "Ezra", "Neh",  "Est",  "Job",  "Psa",   "Prv",  "Eccl", "SSol",
    "Isa",  "Jer",  "Lam",  "Eze",  "Dan",  "Hos",  "Joel", "Amos",  "Obad", "Jonah", "Mic",
    "Nahum", "Hab", "Zep",  "Hag",  "Zec",  "Mal",  "Mat",  "Mark",  "Luke", "John", "Acts",
    "Rom",  "1Cor", "2Cor", "Gal",  "Eph",  "Phi",  "Col",  "1Th",   "2Th",  "1Tim", "2Tim",
    "Titus", "Phmn", "Heb", "Jas",  "1Pet", "2Pet", "1Jn",  "2Jn",   "3Jn",  "Jude", "Rev"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Parses 1..4 decimal digits at line[i], advancing i; -1 when there are none (or too many).
int parse_number(std::string_view line, std::size_t& i) {
  int v = 0, digits = 0;
  while (i < line.size() && is_digit(line[i]) && digits < 5) {
    v = v * 10 + (line[i] - '0');
    ++i;
    ++digits;
  }
  return digits >= 1 && digits <= 4 ? v : -1;
}

std::string printable(std::string_view line) {
  std::string s(line.substr(0, 60));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return line.size() > 60 ? s + "..." : s;
}

}  // namespace

const std::array<std::string_view, kKjvNumBooks>& kjv_book_names() { return kNames; }
const std::array<std::string_view, kKjvNumBooks>& kjv_book_abbreviations() { return kAbbrevs; }

std::string kjv_default_path() {
  const char* env = std::getenv("MG_KJV_PATH");
  return env && *env ? std::string(env) : std::string(kKjvDefaultPath);
}

std::vector<Verse> parse_kjv_text(std::string_view text, const std::string& name) {
  static const std::unordered_map<std::string_view, int> book_of = [] {
    std::unordered_map<std::string_view, int> m;
    for (int b = 0; b < kKjvNumBooks; ++b) m.emplace(kAbbrevs[std::size_t(b)], b);
    return m;
  }();
  std::vector<Verse> verses;
  verses.reserve(31102);
  std::size_t line_no = 0, at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    auto fail = [&](const auto&... why) {
      MG_THROW(Error, "read_kjv: '", name, "' line ", line_no, " \"", printable(line), "\": ", why...);
    };
    // "<Abbr><chapter>:<verse> <text>": the abbreviation is an optional digit then letters.
    std::size_t i = (!line.empty() && is_digit(line[0])) ? 1 : 0;
    while (i < line.size() && is_alpha(line[i])) ++i;
    const std::string_view abbrev = line.substr(0, i);
    const auto book_it = abbrev.empty() ? book_of.end() : book_of.find(abbrev);
    const int chapter = parse_number(line, i);
    const bool colon = i < line.size() && line[i] == ':';
    if (colon) ++i;
    const int verse = colon ? parse_number(line, i) : -1;
    const bool space = i < line.size() && line[i] == ' ';
    const bool is_verse_line = book_it != book_of.end() && chapter > 0 && verse > 0 && space;
    if (!is_verse_line) {
      // The title line(s) before Genesis 1:1 — but not a damaged verse line ("Gf1:1 ..."), which
      // would silently drop the first verse.
      if (verses.empty() && line_no <= 3 && !(chapter > 0 && colon)) continue;
      if (!abbrev.empty() && book_it == book_of.end() && chapter > 0) fail("unknown book abbreviation '", abbrev, "'");
      fail("not a verse line (expected \"<Book><chapter>:<verse> <text>\")");
    }
    Verse v{.book = book_it->second,
            .book_name = std::string(kNames[std::size_t(book_it->second)]),
            .chapter = chapter,
            .verse = verse,
            .text = std::string(line.substr(i + 1))};
    if (!verses.empty()) {
      const Verse& p = verses.back();
      if (v.book < p.book) fail(v.book_name, " after ", p.book_name, ": books out of canonical order");
      if (v.book == p.book && (v.chapter < p.chapter || (v.chapter == p.chapter && v.verse <= p.verse))) {
        fail(v.book_name, " ", v.chapter, ":", v.verse, " does not follow ", p.book_name, " ", p.chapter, ":",
             p.verse);
      }
    }
    verses.push_back(std::move(v));
  }
  MG_CHECK(!verses.empty(), Error, "read_kjv: '", name, "' holds no verse lines");
  return verses;
}

std::vector<Verse> read_kjv(const std::string& path_arg) {
  const bool from_env = path_arg.empty() && std::getenv("MG_KJV_PATH") && *std::getenv("MG_KJV_PATH");
  const std::string path = path_arg.empty() ? kjv_default_path() : path_arg;
  std::error_code ec;
  MG_CHECK(std::filesystem::is_regular_file(path, ec), Error, "read_kjv: the KJV data file '", path,
           "' does not exist or is not a file",
           from_env ? " (from MG_KJV_PATH)" : "",
           "\n  hint: apt-get install bible-kjv-text (or run scripts/setup as root), or point MG_KJV_PATH at a "
           "copy of bible.data");
  std::string text;
  try {
    text = ec02_read_file(path);
  } catch (const Error& e) {
    MG_THROW(Error, "read_kjv: ", e.what(),
             "\n  hint: the file is damaged or not bible-kjv-text's; reinstall it with apt-get install --reinstall "
             "bible-kjv-text");
  }
  return parse_kjv_text(text, path);
}

}  // namespace mg::data
