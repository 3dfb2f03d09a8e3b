// InterruptGuard: raise(SIGINT) / raise(SIGTERM) only set the flag; after the first signal its
// disposition is back to the default (so a second Ctrl-C kills the process); the destructor
// restores the previous handlers; two guards at once are an error.
#include <catch2/catch.hpp>

#include <csignal>

#include "examples/common/interrupt.h"
#include "test_util.h"

using namespace mg::example;

namespace {

using Handler = void (*)(int);

Handler current_handler(int sig) {
  struct sigaction sa {};
  REQUIRE(::sigaction(sig, nullptr, &sa) == 0);
  return sa.sa_handler;
}

}  // namespace

TEST_CASE("interrupt: SIGINT sets the flag, and the next one would act by default", "[examples][interrupt]") {
  const Handler before = current_handler(SIGINT);
  {
    InterruptGuard guard;
    CHECK_FALSE(guard.requested());
    CHECK(guard.signal_number() == 0);
    CHECK(std::string(guard.signal_name()).empty());
    CHECK(current_handler(SIGINT) != SIG_DFL);
    REQUIRE(std::raise(SIGINT) == 0);  // the process survives: the handler only set the flag
    CHECK(guard.requested());
    CHECK(guard.signal_number() == SIGINT);
    CHECK(std::string(guard.signal_name()) == "SIGINT");
    CHECK(current_handler(SIGINT) == SIG_DFL);   // a second Ctrl-C force-quits
    CHECK(current_handler(SIGTERM) != SIG_DFL);  // SIGTERM is still caught
  }
  CHECK(current_handler(SIGINT) == before);  // the previous handler is back
}

TEST_CASE("interrupt: SIGTERM too, a new guard starts clear, one guard at a time", "[examples][interrupt]") {
  {
    InterruptGuard guard;
    CHECK_FALSE(guard.requested());
    REQUIRE(std::raise(SIGTERM) == 0);
    CHECK(guard.requested());
    CHECK(std::string(guard.signal_name()) == "SIGTERM");
    MG_REQUIRE_ERROR(InterruptGuard(), "InterruptGuard: another InterruptGuard is already active");
  }
  InterruptGuard again;  // the failed second guard did not leave the slot taken
  CHECK_FALSE(again.requested());
}
