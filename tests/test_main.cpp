// Catch2 main shared by every test executable. Test cases tagged [gpu] need a CUDA device, those
// tagged [gpu2] two: without enough (a CPU-only build, no driver or GPU, one GPU), a run whose
// selected test cases all need more devices than the machine has prints why and exits with
// kSkipCode, which CTest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt), never as
// passed. CTest runs one test case per process, so each such case shows up as skipped on its own;
// a run of a whole executable, or of a filter that also selects cases the machine can run, leaves
// them out and says so.
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

// A test spec that selects exactly the test case named `name`: the characters Catch2's parser
// treats as syntax inside a name escaped with a backslash.
std::string exact_name_spec(const std::string& name) {
  std::string spec;
  spec.reserve(2 * name.size());
  for (const char c : name) {
    if (c == ',' || c == '[' || c == ']' || c == '*' || c == '\\' || c == '"' || c == '~') spec.push_back('\\');
    spec.push_back(c);
  }
  return spec;
}

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
    // -# tags each case with its file ([#test_cuda_graph]); Catch2 does it only inside run(),
    // after this check, so do it now (again in run() is harmless: tags are deduplicated).
    if (data.filenamesAsTags) Catch::applyFilenamesAsTags(config);
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
    if (std::any_of(selected.begin(), selected.end(), too_many)) {
      // Some selected cases need more devices than there are: run the others, by name, and say so
      // (a filter such as "[nccl]" on one GPU would otherwise fail its [gpu2] cases).
      std::string names;  // one spec, the names separated by commas (Catch2's "or")
      std::size_t left_out = 0;
      for (const Catch::TestCase& t : selected) {
        if (too_many(t)) {
          ++left_out;
        } else {
          names += (names.empty() ? "" : ",") + exact_name_spec(t.name);
        }
      }
      Catch::ConfigData narrowed = data;
      narrowed.testsOrTags = {names};
      std::cout << "note: " << left_out << " selected test case(s) tagged [gpu] or [gpu2] are not run: " << why
                << "\n";
      session.useConfigData(narrowed);
    }
  }
  return session.run();
}
