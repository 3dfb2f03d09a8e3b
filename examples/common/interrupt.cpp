#include "examples/common/interrupt.h"

#include <atomic>
#include <csignal>

#include "core/error.h"

namespace mg::example {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

std::atomic<int> g_signal{0};  // first signal received, 0 if none
std::atomic<bool> g_installed{false};
struct sigaction g_old_int, g_old_term;

extern "C" void on_interrupt(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);  // keep the first one
}

}  // namespace

InterruptGuard::InterruptGuard() {
  MG_CHECK(!g_installed.exchange(true), Error, "InterruptGuard: another InterruptGuard is already active");
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;  // one catch per signal; the next one acts by default
  if (::sigaction(SIGINT, &sa, &g_old_int) != 0) {
    g_installed.store(false);
    MG_THROW(Error, "InterruptGuard: installing the SIGINT handler failed");
  }
  if (::sigaction(SIGTERM, &sa, &g_old_term) != 0) {
    ::sigaction(SIGINT, &g_old_int, nullptr);
    g_installed.store(false);
    MG_THROW(Error, "InterruptGuard: installing the SIGTERM handler failed");
  }
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed.store(false);
}

bool InterruptGuard::requested() const { return g_signal.load() != 0; }

int InterruptGuard::signal_number() const { return g_signal.load(); }

const char* InterruptGuard::signal_name() const {
  switch (g_signal.load()) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "";
  }
}

}  // namespace mg::example
