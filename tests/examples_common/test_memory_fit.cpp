// check_batch_fits: the memory of one step predicted from two probes, compared with this process's
// share of the available memory (MG_AVAILABLE_MEMORY pretends a size; LOCAL_WORLD_SIZE processes
// share it), the hint in --batch-size's units; and the peak memory reported across its probes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/common/memory_fit.h"
#include "examples/common/process_memory.h"

using namespace mg::example;

namespace {

constexpr std::size_t kPerSample = std::size_t(8) << 20;  // 8 MiB touched per probed sample

void probe(int64_t b) {
  std::vector<char> v(std::size_t(b) * kPerSample);
  std::memset(v.data(), 1, v.size());
}

// Sets an environment variable for the scope, restoring the previous state.
struct EnvVar {
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~EnvVar() {
    if (old_.empty()) ::unsetenv(name_);
    else ::setenv(name_, old_.c_str(), 1);
  }
  const char* name_;
  std::string old_;
};

}  // namespace

TEST_CASE("check_batch_fits divides the memory among the processes of this machine", "[examples][memory]") {
  EnvVar cap("MG_AVAILABLE_MEMORY", "629145600");  // 600 MiB
  {
    // One process, 32 samples of 8 MiB: about 256 MiB (320 with the margin) of 540 usable.
    const MemoryEstimate e = check_batch_fits(probe, 32);
    CHECK(e.ranks_here == 1);
    // 8 MiB a sample, more under AddressSanitizer (its shadow memory adds 1/8: 9.4 MiB measured).
    CHECK(e.bytes_per_sample >= 0.9 * double(kPerSample));
    CHECK(e.bytes_per_sample <= 1.3 * double(kPerSample));
  }
  // Two processes started by mixgrad-run on this machine: 270 MiB each, and the step no longer
  // fits. The batch is named as given (--batch-size 64 over 2 ranks) and the hint is for that flag.
  EnvVar ranks("LOCAL_WORLD_SIZE", "2");
  try {
    (void)check_batch_fits(probe, 32, 64);
    FAIL("no error");
  } catch (const mg::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("batch size 64 (32 samples on this process) needs about") != std::string::npos);
    CHECK(msg.find("shared by the 2 processes on this machine (LOCAL_WORLD_SIZE)") != std::string::npos);
    const std::size_t at = msg.find("hint: use --batch-size ");
    REQUIRE(at != std::string::npos);
    const int64_t hint = std::atoll(msg.c_str() + at + 23);
    CHECK(hint >= 32);  // about 2 x 27 samples of 8 MiB in 270 / 1.25 MiB (2 x 24 of 9 MiB)
    CHECK(hint < 64);
  }
}

TEST_CASE("the reported peak memory keeps the peak from before a probe reset the kernel's counter", "[examples][memory]") {
  const int64_t before = peak_rss_bytes();
  {
    std::vector<char> big(std::size_t(64) << 20);  // a 64 MiB peak, then freed
    std::memset(big.data(), 1, big.size());
  }
  const int64_t peak = peak_rss_bytes();
  REQUIRE(peak >= before);
  reset_peak_rss();
  CHECK(peak_rss_bytes() >= peak);  // the counter restarted, the process's peak did not
  // Read in this order (the counter may grow between two reads; a CHECK's operands may be read
  // in either order).
  const int64_t since = peak_rss_since_reset_bytes();
  const int64_t overall = peak_rss_bytes();
  CHECK(since <= overall);
}
