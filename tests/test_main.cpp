// Catch2 main shared by every test executable. Test cases tagged [gpu] need a CUDA device:
// without one (a CPU-only build, or no driver or GPU), a run whose selected test cases all carry
// [gpu] prints why and exits with kSkipCode, which CTest reports as skipped (SKIP_RETURN_CODE in
// tests/CMakeLists.txt), never as passed. CTest runs one test case per process, so each [gpu]
// case shows up as skipped on its own; a run of a whole executable leaves the [gpu] cases out.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>

#include "mixgrad/cuda/cuda.h"

namespace {

constexpr int kSkipCode = 77;

bool needs_gpu(const Catch::TestCase& t) {
  return std::find(t.tags.begin(), t.tags.end(), "gpu") != t.tags.end();
}

}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  Catch::ConfigData& data = session.configData();
  const bool listing = data.listTests || data.listTestNamesOnly || data.listTags || data.listReporters;
  if (!listing && !mg::cuda::is_available() && data.testsOrTags.empty()) {
    // A whole-executable run without a device runs everything but the [gpu] cases, and says so.
    data.testsOrTags.push_back("~[gpu]");
    std::cout << "note: test cases tagged [gpu] are not run: " << mg::cuda::unavailable_reason() << "\n";
  } else if (!listing && !mg::cuda::is_available()) {
    const Catch::Config& config = session.config();
    const auto selected = Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
    if (!selected.empty() && std::all_of(selected.begin(), selected.end(), needs_gpu)) {
      std::cout << "skipped: " << selected.size() << " test case(s) tagged [gpu] need a CUDA device: "
                << mg::cuda::unavailable_reason() << "\n";
      return kSkipCode;
    }
  }
  return session.run();
}
