// Shared fixtures of the text-data tests: the KJV corpus and a tokenizer trained on it, parsed
// once per process (static), a scratch directory, and a guard that skips a test case with a
// warning when the bible-kjv-text package is not installed.
#pragma once
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/text/kjv.h"
#include "data/text/verse_datasets.h"
#include "data/text/wordpiece.h"

namespace mg::test::text {

inline bool kjv_available() { return std::filesystem::is_regular_file(mg::data::kjv_default_path()); }

inline const std::vector<mg::data::Verse>& kjv() {
  static const std::vector<mg::data::Verse> verses = [] {
    const auto t0 = std::chrono::steady_clock::now();
    auto v = mg::data::read_kjv();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    WARN("read_kjv: " << v.size() << " verses in " << ms << " ms");
    return v;
  }();
  return verses;
}

// WordPiece with 8192 tokens trained on every verse.
inline const mg::data::WordPiece& kjv_tokenizer() {
  static const mg::data::WordPiece tok = [] {
    const std::vector<std::string> texts = mg::data::verse_texts(kjv());
    const auto t0 = std::chrono::steady_clock::now();
    auto t = mg::data::WordPiece::train(texts, {.vocab_size = 8192});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    WARN("WordPiece::train(KJV, 8192): " << t.vocab_size() << " tokens in " << ms << " ms");
    return t;
  }();
  return tok;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("mg_test_text_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace mg::test::text

// Skips the rest of a test case (with a warning) when the KJV data file is missing.
#define MG_REQUIRE_KJV()                                                                         \
  do {                                                                                           \
    if (!::mg::test::text::kjv_available()) {                                                    \
      WARN("skipped: " << ::mg::data::kjv_default_path()                                         \
                       << " is missing (apt-get install bible-kjv-text, or set MG_KJV_PATH)");   \
      return;                                                                                    \
    }                                                                                            \
  } while (0)
