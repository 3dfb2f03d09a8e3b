// Catch2 main shared by every test executable. Test cases tagged [gpu] need a CUDA device:
// without one (a CPU-only build, or no driver or GPU), a run whose selected test cases all carry
// [gpu] prints why and exits with kSkipCode, which CTest reports as skipped (SKIP_RETURN_CODE in
// tests/CMakeLists.txt), never as passed. CTest runs one test case per process, so each [gpu]
// case shows up as skipped on its own; a run of a whole executable leaves the [gpu] cases out.
// A filter that matches no test case fails (kNoMatchCode): Catch2 alone would pass it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>

#include "mixgrad/cuda/cuda.h"

namespace {

constexpr int kSkipCode = 77;
constexpr int kNoMatchCode = 3;

bool needs_gpu(const Catch::TestCase& t) {
  return std::find(t.tags.begin(), t.tags.end(), "gpu") != t.tags.end();
}

}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  Catch::ConfigData& data = session.configData();
  const bool listing = data.listTests || data.listTestNamesOnly || data.listTags || data.listReporters;
  if (!listing && data.testsOrTags.empty()) {
    if (!mg::cuda::is_available()) {
      // A whole-executable run without a device runs everything but the [gpu] cases, and says so.
      data.testsOrTags.push_back("~[gpu]");
      std::cout << "note: test cases tagged [gpu] are not run: " << mg::cuda::unavailable_reason() << "\n";
    }
  } else if (!listing) {
    const Catch::Config& config = session.config();
    const auto selected = Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
    if (selected.empty()) {
      // Catch2 passes a run that matches nothing, so a CTest entry whose name no longer matches
      // (a renamed case, a name CTest split at a ';') would pass without running anything.
      std::cerr << "error: no test case matches the filter";
      for (const std::string& f : data.testsOrTags) std::cerr << " \"" << f << "\"";
      std::cerr << "\n";
      return kNoMatchCode;
    }
    if (!mg::cuda::is_available() && std::all_of(selected.begin(), selected.end(), needs_gpu)) {
      std::cout << "skipped: " << selected.size() << " test case(s) tagged [gpu] need a CUDA device: "
                << mg::cuda::unavailable_reason() << "\n";
      return kSkipCode;
    }
  }
  return session.run();
}
