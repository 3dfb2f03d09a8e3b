// Replays the fuzzing regression corpus (tests/fuzz/corpus/<harness>/) through the same harness
// functions the libFuzzer binaries run: every file must end in success or mg::Error — never another
// exception (a sanitizer build also catches crashes and undefined behaviour here). Files named
// seed_* were written by mixgrad itself (tests/fuzz/libfuzzer/make_seeds.cpp) and must load.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_harness.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<fs::path> corpus_files(const std::string& harness) {
  const fs::path dir = fs::path(MG_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / harness;
  INFO("corpus folder " << dir.string());
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs one corpus file; returns the exception text when something other than mg::Error escaped.
std::string escaped_exception(const mg::fuzz::Harness& h, const std::string& bytes) {
  try {
    h.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  } catch (const mg::Error& e) {
    return std::string("mg::Error escaped the harness: ") + e.what();  // the harness must catch it
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
  return "";
}

}  // namespace

TEST_CASE("fuzz corpus: every file ends in success or mg::Error", "[fuzz][io]") {
  std::size_t total = 0;
  for (const mg::fuzz::Harness& h : mg::fuzz::harnesses()) {
    const std::vector<fs::path> files = corpus_files(h.name);
    INFO("harness " << h.name);
    CHECK(files.size() >= 2);  // at least one seed and one regression input per harness
    std::size_t seeds = 0;
    for (const fs::path& p : files) {
      const std::string bytes = read_file(p);
      INFO("file " << p.string() << " (" << bytes.size() << " bytes)");
      const auto start = std::chrono::steady_clock::now();
      CHECK(escaped_exception(h, bytes) == "");
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      CHECK(seconds < 10.0);  // no input may make a reader hang
      if (p.filename().string().rfind("seed_", 0) == 0) {
        ++seeds;
        CHECK(mg::fuzz::last_error() == "");  // mixgrad reads what it writes
      }
      ++total;
    }
    CHECK(seeds >= 1);
  }
  CHECK(total >= 8);
}

TEST_CASE("fuzz corpus: the crashers of issue 18 are named errors", "[fuzz][io]") {
  // The 19-byte {"a":1e999} header (a JSON out_of_range exception) and a header nested 105,000
  // levels deep (a stack overflow), for both JSON readers.
  struct Case {
    const char* harness;
    const char* file;
    const char* message;
  };
  const Case cases[] = {
      {"safetensors", "issue18_number_overflow", "the header has a number beyond the range of a double"},
      {"safetensors", "issue18_deep_nesting", "the header nests arrays and objects more than 64 levels deep"},
      {"checkpoint", "issue18_number_overflow", "the header has a number beyond the range of a double"},
      {"checkpoint", "issue18_deep_nesting", "the header nests arrays and objects more than 64 levels deep"},
      {"checkpoint", "issue18_contents_number_overflow",
       "the \"mixgrad.checkpoint\" metadata has a number beyond the range of a double"},
      {"checkpoint", "issue18_contents_deep_nesting",
       "the \"mixgrad.checkpoint\" metadata nests arrays and objects more than 64 levels deep"},
  };
  for (const Case& c : cases) {
    const mg::fuzz::Harness* h = nullptr;
    for (const auto& x : mg::fuzz::harnesses()) {
      if (std::string(x.name) == c.harness) h = &x;
    }
    REQUIRE(h != nullptr);
    const fs::path p = fs::path(MG_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / c.harness / c.file;
    INFO("file " << p.string());
    REQUIRE(fs::is_regular_file(p));
    const std::string bytes = read_file(p);
    REQUIRE(escaped_exception(*h, bytes) == "");
    CHECK_THAT(mg::fuzz::last_error(), Catch::Matchers::Contains(c.message));
    CHECK(mg::fuzz::last_error().size() < 1000);  // a bounded message, not a dump of the value
  }
}
