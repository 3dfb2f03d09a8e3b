// The test suite's own hygiene: catch_discover_tests registers each TEST_CASE name with CTest
// through a CMake list, so a ';' in a name splits it into entries whose filters match nothing —
// and a Catch2 run that matches nothing passes. Such a case never ran in CI (31 did, until this
// test). A name starting with '-' reaches the test binary as an unknown option and fails. This
// scans every test source for names CTest would mangle.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>
#include <string>
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

TEST_CASE("test names: no TEST_CASE name contains a semicolon or starts with a dash (CTest would never run it)", "[meta]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(MG_SOURCE_DIR) / "tests";
  REQUIRE(fs::is_directory(root));
  const std::regex name(R"re(TEST_CASE\(\s*"((?:[^"\\]|\\.)*)")re");
  int files = 0, cases = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    ++files;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), name); it != std::sregex_iterator(); ++it) {
      ++cases;
      const std::string n = (*it)[1].str();
      INFO(entry.path().string() << ": \"" << n << "\"");
      CHECK(n.find(';') == std::string::npos);
      CHECK_FALSE(n.starts_with("-"));
    }
  }
  CHECK(files > 50);
  CHECK(cases > 500);  // the scan found the suite
}

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text of a run of C++ string literals ("a" "b" -> ab), escapes kept.
std::string join_literals(const std::string& run) {
  static const std::regex literal(R"re("((?:[^"\\]|\\.)*)")re");
  std::string out;
  for (auto it = std::sregex_iterator(run.begin(), run.end(), literal); it != std::sregex_iterator(); ++it) {
    out += (*it)[1].str();
  }
  return out;
}

}  // namespace

TEST_CASE("test names: every [gpu] case is built and selected by benchmarks/gpu/check.sh", "[meta]") {
  // A [gpu] case skips everywhere but on a GPU machine, where only the check script runs tests: a
  // case whose binary it does not build, or whose label and name none of its ctest steps select,
  // would never run at all.
  namespace fs = std::filesystem;
  const fs::path source(MG_SOURCE_DIR);
  const std::string check = read_file(source / "benchmarks/gpu/check.sh");
  REQUIRE(check.find("ctest") != std::string::npos);
  struct Step {
    std::regex label, name;
    bool any_name;
  };
  std::vector<Step> steps;
  const std::regex ctest_step(R"re(ctest --test-dir "\$BUILD" -L '([^']*)'(?:\s+-R '([^']*)')?)re");
  for (auto it = std::sregex_iterator(check.begin(), check.end(), ctest_step); it != std::sregex_iterator(); ++it) {
    steps.push_back({std::regex((*it)[1].str()), std::regex((*it)[2].matched ? (*it)[2].str() : ""),
                     !(*it)[2].matched});
  }
  REQUIRE(steps.size() >= 3);
  // folder under tests/ -> the binary and the CTest label and name prefix its cases get.
  auto binary_of = [](const std::string& folder) { return "test_" + folder; };
  auto label_of = [](const std::string& folder) {
    return folder == "examples_smoke" ? std::string("examples") : folder == "bench_amp" ? std::string("bench") : folder;
  };
  const std::regex test_case(R"re(TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\))re");
  int gpu_cases = 0;
  for (const auto& entry : fs::recursive_directory_iterator(source / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    const std::string folder = fs::relative(entry.path(), source / "tests").begin()->string();
    const std::string s = read_file(entry.path());
    for (auto it = std::sregex_iterator(s.begin(), s.end(), test_case); it != std::sregex_iterator(); ++it) {
      const std::string name = join_literals((*it)[1].str()), tags = join_literals((*it)[2].str());
      if (tags.find("[gpu]") == std::string::npos && tags.find("[gpu2]") == std::string::npos) continue;
      ++gpu_cases;
      const std::string label = label_of(folder), ctest_name = label + ": " + name;
      INFO(entry.path().string() << ": \"" << name << "\" (label " << label << ", binary " << binary_of(folder) << ")");
      CHECK(std::regex_search(check, std::regex("\\b" + binary_of(folder) + "\\b")));
      bool selected = false;
      for (const Step& st : steps) {
        selected = selected || (std::regex_search(label, st.label) && (st.any_name || std::regex_search(ctest_name, st.name)));
      }
      CHECK(selected);
    }
  }
  CHECK(gpu_cases > 30);  // the scan found them
}
