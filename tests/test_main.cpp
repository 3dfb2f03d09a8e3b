// Catch2 main shared by every test executable. Test cases tagged [gpu] need a CUDA device, those
// tagged [gpu2] two, those tagged both [gpu] and [nccl] a build with NCCL: without them (a
// CPU-only build, no driver or GPU, one GPU, the CUDA emulator), a run whose selected test cases
// all need what the machine lacks prints why and exits with
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
#include <vector>

#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/nccl_comm.h"

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
  if (listing) return session.run();
  const int devices = mg::cuda::device_count();  // 0 without the backend, a driver or a GPU
  const bool nccl = mg::cuda::nccl_built();
  // Why a test case cannot run here ("" when it can): too few devices, or NCCL on a GPU in a build
  // without it (the host-side [nccl] cases test exactly that build, so they run).
  const auto missing = [&](const Catch::TestCase& t) -> std::string {
    if (devices_needed(t) > devices) {
      return devices == 0 ? mg::cuda::unavailable_reason()
                          : "this machine has " + std::to_string(devices) + " CUDA device";
    }
    if (!nccl && has_tag(t, "gpu") && has_tag(t, "nccl")) {
      return "this build has no NCCL (" + mg::cuda::nccl_unavailable_reason() + ")";
    }
    return "";
  };
  const Catch::Config& config = session.config();
  // -# tags each case with its file ([#test_cuda_graph]); Catch2 does it only inside run(),
  // after this check, so do it now (again in run() is harmless: tags are deduplicated).
  if (data.filenamesAsTags) Catch::applyFilenamesAsTags(config);
  const bool whole = data.testsOrTags.empty();
  std::vector<Catch::TestCase> selected;
  if (whole) {  // what Catch2 runs without a filter: every case not hidden
    for (const Catch::TestCase& t : Catch::getAllTestCasesSorted(config)) {
      if (!t.isHidden()) selected.push_back(t);
    }
  } else {
    selected = Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
  }
  if (selected.empty()) {
    if (whole) return session.run();
    // Catch2 passes a run that matches nothing, so a CTest entry whose name no longer matches
    // (a renamed case, a name CTest split at a ';') would pass without running anything.
    std::cerr << "error: no test case matches the filter";
    for (const std::string& f : data.testsOrTags) std::cerr << " \"" << f << "\"";
    std::cerr << "\n";
    return kNoMatchCode;
  }
  std::string names, why;  // the runnable cases, one spec (Catch2's "or"); the first reason
  std::size_t left_out = 0;
  for (const Catch::TestCase& t : selected) {
    const std::string m = missing(t);
    if (m.empty()) {
      names += (names.empty() ? "" : ",") + exact_name_spec(t.name);
    } else {
      ++left_out;
      if (why.empty()) why = m;
    }
  }
  if (left_out == selected.size()) {
    std::cout << "skipped: " << left_out << " test case(s) tagged [gpu], [gpu2] or [nccl] cannot run: " << why << "\n";
    return kSkipCode;
  }
  if (left_out > 0) {
    // Run the others, by name, and say so (a filter such as "[nccl]" on one GPU would otherwise
    // fail its [gpu2] cases; a whole-executable run would fail every [gpu] case without a GPU).
    Catch::ConfigData narrowed = data;
    narrowed.testsOrTags = {names};
    std::cout << "note: " << left_out << " test case(s) tagged [gpu], [gpu2] or [nccl] are not run: " << why << "\n";
    session.useConfigData(narrowed);
  }
  return session.run();
}
