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
