// The King James Bible as verse records, read from Debian's bible-kjv-text data file (an EC02
// container, data/text/ec02.h). The decompressed text is a title line followed by one line per
// verse, "Ge1:1 In the beginning God created the heaven and the earth."; the reader maps the
// book abbreviation to its canonical index and name and keeps the verse text byte for byte (as
// `bible -f` prints it, double spaces and all).
//
//   std::vector<mg::data::Verse> bible = mg::data::read_kjv();   // 31,102 verses
//   bible[0].book_name == "Genesis"; bible.back().text == "The grace of our Lord ... Amen."
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mg::data {

inline constexpr int kKjvNumBooks = 66;
inline constexpr int kKjvOldTestamentBooks = 39;  // books 0..38 Old, 39..65 New Testament
inline constexpr const char* kKjvDefaultPath = "/usr/lib/bible.data";

struct Verse {
  int book = 0;           // 0 (Genesis) .. 65 (Revelation)
  std::string book_name;  // canonical English name: "Genesis", "1 Samuel", "Song of Solomon"
  int chapter = 0;        // 1-based
  int verse = 0;          // 1-based
  std::string text;       // exactly as in the file, without the reference or the newline
};

// Canonical book names and the abbreviations the data file uses ("Ge", "1Sm", "SSol", ...).
const std::array<std::string_view, kKjvNumBooks>& kjv_book_names();
const std::array<std::string_view, kKjvNumBooks>& kjv_book_abbreviations();
inline bool kjv_is_new_testament(int book) { return book >= kKjvOldTestamentBooks; }

// The file read_kjv("") opens: $MG_KJV_PATH when set and non-empty, else /usr/lib/bible.data.
std::string kjv_default_path();

// Reads and validates the whole Bible. A missing file is an mg::Error with the install hint
// (apt-get install bible-kjv-text); a corrupt or truncated one an mg::Error saying where.
std::vector<Verse> read_kjv(const std::string& path = "");

// Parses decompressed text (title line(s), then "<Abbr><chapter>:<verse> <text>" lines) into
// verses, checking books are known and in canonical order and references increase. `name` is
// used in error messages.
std::vector<Verse> parse_kjv_text(std::string_view text, const std::string& name = "<text>");

}  // namespace mg::data
