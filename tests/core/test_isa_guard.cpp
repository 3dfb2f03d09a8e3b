// The processor check (core/isa_guard.h): the extensions the library was compiled for are this
// processor's (else this program would not have started), the refusal names the missing ones, and
// a program started with MG_TEST_PROCESSOR_LACKS naming a compiled extension stops before main
// with that refusal and status 1 instead of an illegal instruction later.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/isa_guard.h"

using namespace mg;

namespace {

// Runs this test program again with `env` set (only the first test case above); returns its exit
// status and what it wrote.
std::pair<int, std::string> rerun_self(const std::string& env) {
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  REQUIRE(n > 0);
  const std::string command = env + " '" + std::string(self.data(), std::size_t(n)) + "' 'isa guard: the compiled extensions*' 2>&1";
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST_CASE("isa guard: the compiled extensions are this processor's, and the refusal names the missing ones",
          "[core][isa]") {
  CHECK((isa::kCompiledExtensions & ~isa::processor_extensions()) == 0);
  CHECK(std::string(isa::extension_name(0)) == "sse3");
  CHECK(std::string(isa::extension_name(10)) == "avx512f");
  CHECK(isa::extension_name(-1) == nullptr);
  CHECK(isa::extension_name(64) == nullptr);
  char out[512] = "untouched";
  CHECK_FALSE(isa::describe_missing(0b111, 0b111, out, sizeof out));
  CHECK_FALSE(isa::describe_missing(0, 0, out, sizeof out));
  CHECK(std::string(out) == "untouched");
  const uint64_t avx2_avx512f = (uint64_t(1) << 6) | (uint64_t(1) << 10);
  REQUIRE(isa::describe_missing(avx2_avx512f | 1, 1, out, sizeof out));
  CHECK_THAT(out, Catch::StartsWith("mixgrad: this library was compiled with -march=native (MG_NATIVE=ON) on a "
                                    "processor with avx2, avx512f, which this processor lacks"));
  CHECK_THAT(out, Catch::Contains("-DMG_NATIVE=OFF"));
  char small[16];
  REQUIRE(isa::describe_missing(avx2_avx512f, 0, small, sizeof small));
  CHECK(std::strlen(small) == sizeof small - 1);  // cut, still terminated
}

TEST_CASE("isa guard: a program on a processor without a compiled extension stops before main, naming it",
          "[core][isa]") {
  int compiled = -1;
  for (int i = 0; isa::extension_name(i) != nullptr; ++i) {
    if ((isa::kCompiledExtensions >> i & 1) != 0) compiled = i;  // the last (most specific) one
  }
  if (compiled < 0) {
    // MG_NATIVE=OFF (or not x86-64): nothing assumed, so nothing can be missing.
    const auto [status, out] = rerun_self("MG_TEST_PROCESSOR_LACKS=avx2");
    CHECK(status == 0);
    return;
  }
  const std::string name = isa::extension_name(compiled);
  const auto [status, out] = rerun_self("MG_TEST_PROCESSOR_LACKS=" + name);
  CHECK(status == 1);
  CHECK_THAT(out, Catch::Contains("on a processor with " + name + ", which this processor lacks"));
  CHECK_THAT(out, Catch::Contains("hint: rebuild mixgrad on this machine"));
  // An extension the library was not compiled for changes nothing.
  const auto [fine, listing] = rerun_self("MG_TEST_PROCESSOR_LACKS=not-an-extension");
  CHECK(fine == 0);
  CHECK_THAT(listing, Catch::Contains("All tests passed"));
}
