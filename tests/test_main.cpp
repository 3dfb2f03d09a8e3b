// Catch2 main shared by every test executable. Test cases tagged [gpu] need a CUDA device, those
// tagged [gpu2] two: without enough (a CPU-only build, no driver or GPU, one GPU), a run whose
// selected test cases all need more devices than the machine has prints why and exits with
// kSkipCode, which CTest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never as
// passed. CTest runs one test case per process, so each such case shows up as skipped on its own;
// a run of a whole executable leaves them out.
// A filter that matches no test case fails (kNoMatchCode): Catch2 alone would pass it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>

#include "mixgrad/cuda/cuda.h"

namespace {

constexpr int kSkipCode = 77;
constexpr int kNoMatchCode = 3;

bool has_tag(const Catch::TestCase& t, const char* tag) {
  return std::find(t.tags.begin(), t.tags.end(), tag) != t.tags.end();
}

// CUDA devices the test case needs: 2 for [gpu2], 1 for [gpu], else 0.
int devices_needed(const Catch::TestCase& t) { return has_tag(t, "gpu2") ? 2 : has_tag(t, "gpu") ? 1 : 0; }

}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  Catch::ConfigData& data = session.configData();
  const bool listing = data.listTests || data.listTestNamesOnly || data.listTags || data.listReporters;
  const int devices = mg::cuda::device_count();  // 0 without the backend, a driver or a GPU
  const std::string why = devices == 0 ? mg::cuda::unavailable_reason()
                                       : "this machine has " + std::to_string(devices) + " CUDA device";
  if (!listing && data.testsOrTags.empty()) {
    // A whole-executable run runs everything but the cases needing more devices, and says so
    // (one test spec: its exclusions all apply).
    if (devices == 0) {
      data.testsOrTags.push_back("~[gpu]~[gpu2]");
      std::cout << "note: test cases tagged [gpu] and [gpu2] are not run: " << why << "\n";
    } else if (devices < 2) {
      data.testsOrTags.push_back("~[gpu2]");
      std::cout << "note: test cases tagged [gpu2] (two CUDA devices) are not run: " << why << "\n";
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
    const auto too_many = [devices](const Catch::TestCase& t) { return devices_needed(t) > devices; };
    if (std::all_of(selected.begin(), selected.end(), too_many)) {
      std::cout << "skipped: " << selected.size() << " test case(s) tagged [gpu] or [gpu2] need "
                << (std::any_of(selected.begin(), selected.end(), [](const Catch::TestCase& t) { return devices_needed(t) == 1; })
                        ? "a CUDA device"
                        : "two CUDA devices")
                << ": " << why << "\n";
      return kSkipCode;
    }
  }
  return session.run();
}
