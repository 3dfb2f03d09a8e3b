// The program tests/launcher starts under mixgrad-run. Modes:
//   env                       prints the distributed environment on stdout, a line on stderr
//   fail <rank> <code>        rank <rank> prints 30 numbered lines and exits with <code>; the
//                             others print "waiting" and sleep (up to 60 s) until stopped
//   killed <rank>             rank <rank> prints a line and kills itself (SIGKILL); the others sleep
//   trap                      prints "ready", then waits (up to 60 s) for SIGTERM and prints
//                             "rank R got SIGTERM" before exiting 0
//   slow_trap <ms>            as trap, but takes <ms> milliseconds after the signal (a checkpoint
//                             being saved) before printing "rank R saved" and exiting 0
// Decision: no libmixgrad: the launcher is tested on its own.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile sig_atomic_t g_term = 0;
void on_term(int) { g_term = 1; }

const char* env_or(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

int rank() { return std::atoi(env_or("RANK")); }

void sleep_until_stopped() {
  for (int i = 0; i < 600 && !g_term; ++i) ::usleep(100 * 1000);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    std::printf("RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s NODE_RANK=%s MASTER_ADDR=%s MASTER_PORT=%s\n",
                env_or("RANK"), env_or("LOCAL_RANK"), env_or("WORLD_SIZE"), env_or("LOCAL_WORLD_SIZE"),
                env_or("NODE_RANK"), env_or("MASTER_ADDR"), env_or("MASTER_PORT"));
    std::fprintf(stderr, "stderr of rank %d\n", rank());
    std::printf("no newline at the end");
    return 0;
  }
  if (mode == "fail" && argc == 4) {
    if (rank() == std::atoi(argv[2])) {
      ::usleep(200 * 1000);  // the others are sleeping by now
      for (int i = 1; i <= 30; ++i) std::printf("line %d\n", i);
      return std::atoi(argv[3]);
    }
    std::printf("waiting\n");
    sleep_until_stopped();
    return 0;
  }
  if (mode == "killed" && argc == 3) {
    if (rank() == std::atoi(argv[2])) {
      std::printf("about to die\n");
      ::raise(SIGKILL);
    }
    sleep_until_stopped();
    return 0;
  }
  if (mode == "trap") {
    struct sigaction sa {};
    sa.sa_handler = on_term;
    ::sigaction(SIGTERM, &sa, nullptr);
    std::printf("ready\n");
    sleep_until_stopped();
    std::printf("rank %d got %s\n", rank(), g_term ? "SIGTERM" : "no signal");
    return 0;
  }
  if (mode == "slow_trap" && argc == 3) {
    struct sigaction sa {};
    sa.sa_handler = on_term;
    ::sigaction(SIGTERM, &sa, nullptr);
    std::printf("ready\n");
    sleep_until_stopped();
    // A second signal interrupts a sleep: keep sleeping until the time has passed.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::atoi(argv[2]));
    while (std::chrono::steady_clock::now() < until) ::usleep(20 * 1000);
    std::printf("rank %d saved\n", rank());
    return 0;
  }
  std::fprintf(stderr, "mg_launch_child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
