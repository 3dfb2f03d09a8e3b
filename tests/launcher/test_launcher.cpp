// mixgrad-run (launcher/): the environment of each rank, prefixed output, a failing rank stopping
// the others with its status and last lines reported, SIGTERM forwarded, command-line errors.
// Every run is bounded by Subprocess::wait's timeout.
#include <catch2/catch.hpp>
#include <signal.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "launcher/launch_options.h"
#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using mg::test::Subprocess;

namespace {

std::vector<std::string> run_cmd(std::vector<std::string> launcher_flags, std::vector<std::string> child) {
  std::vector<std::string> argv{MG_RUN};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  argv.push_back(MG_LAUNCH_CHILD);
  argv.insert(argv.end(), child.begin(), child.end());
  return argv;
}

// Whether a process of this user runs the test child with MASTER_PORT=<port> in its environment.
bool child_running_with_port(int port) {
  const std::string want = "MASTER_PORT=" + std::to_string(port);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(entry.path() / "cmdline", std::ios::binary), env(entry.path() / "environ", std::ios::binary);
    const std::string c((std::istreambuf_iterator<char>(cmd)), {}), e((std::istreambuf_iterator<char>(env)), {});
    if (c.find("mg_launch_child") == std::string::npos) continue;
    std::size_t at = e.find(want);
    if (at != std::string::npos && (at + want.size() == e.size() || e[at + want.size()] == '\0')) return true;
  }
  return false;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// mixgrad-run starting `child` on 2 ranks (a free port), with `flags` added.
std::vector<std::string> two_ranks(std::vector<std::string> child, std::vector<std::string> flags = {}) {
  flags.insert(flags.begin(), {"--nproc-per-node", "2", "--master-port", "0"});
  return run_cmd(flags, child);
}

// Starts `child` (a "trap" mode) on 2 ranks, waits until both printed "ready" (their handlers are
// set), sends mixgrad-run SIGTERM `signals` times 300 ms apart and returns how it ended: within
// `timeout_s`, with 128 + SIGTERM.
Subprocess::Result terminated(std::vector<std::string> child, std::vector<std::string> flags, int signals,
                              int timeout_s) {
  Subprocess p(two_ranks(std::move(child), std::move(flags)));
  REQUIRE(p.read_until([](const std::string& out) { return count(out, "ready\n") == 2; }, 60));
  for (int i = 0; i < signals; ++i) {
    if (i > 0) ::usleep(300 * 1000);
    ::kill(p.pid(), SIGTERM);
  }
  auto r = p.wait(timeout_s);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 128 + SIGTERM);
  return r;
}

}  // namespace

TEST_CASE("mixgrad-run sets each rank's environment and prefixes its output", "[launcher]") {
  Subprocess p(run_cmd({"--nproc-per-node", "3", "--master-port", "0"}, {"env"}));
  auto r = p.wait(60);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 0);
  std::smatch m;
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string k = std::to_string(rank);
    std::regex line("\\[rank " + k + "\\] RANK=" + k + " LOCAL_RANK=" + k +
                    " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 NODE_RANK=0 MASTER_ADDR=127\\.0\\.0\\.1 MASTER_PORT=([0-9]+)\n");
    REQUIRE(std::regex_search(r.out, m, line));
    if (port.empty()) port = m[1];
    CHECK(m[1] == port);  // one port for the whole job
    CHECK(count(r.err, "[rank " + k + "] stderr of rank " + k + "\n") == 1);
    // A last line without a newline is still delivered whole.
    CHECK(count(r.out, "[rank " + k + "] no newline at the end\n") == 1);
  }
  CHECK(std::stoi(port) > 0);
  CHECK(std::stoi(port) != 29500);  // --master-port 0 picked a free port
}

TEST_CASE("mixgrad-run numbers ranks across nodes and can leave output plain", "[launcher]") {
  Subprocess p(run_cmd({"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "2", "--master-addr",
                        "10.1.2.3", "--master-port", "4321", "--output", "plain"},
                       {"env"}));
  auto r = p.wait(60);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 0);
  CHECK(count(r.out, "RANK=4 LOCAL_RANK=0 WORLD_SIZE=6 LOCAL_WORLD_SIZE=2 NODE_RANK=2 MASTER_ADDR=10.1.2.3 MASTER_PORT=4321\n") == 1);
  CHECK(count(r.out, "RANK=5 LOCAL_RANK=1 WORLD_SIZE=6 LOCAL_WORLD_SIZE=2 NODE_RANK=2 MASTER_ADDR=10.1.2.3 MASTER_PORT=4321\n") == 1);
  CHECK(count(r.out, "[rank") == 0);
}

TEST_CASE("mixgrad-run stops the others when a rank fails and reports its status and last lines",
          "[launcher]") {
  Subprocess p(run_cmd({"--nproc-per-node", "3", "--master-port", "0", "--tail-lines", "5",
                        "--grace-seconds", "5"},
                       {"fail", "1", "7"}));
  auto r = p.wait(60);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 7);
  CHECK(r.seconds < 30);  // the sleeping ranks were stopped, not waited for (they sleep 60 s)
  CHECK(count(r.out, "[rank 1] line 30\n") == 1);
  CHECK(r.err.find("mixgrad-run: rank 1 (local rank 1, pid ") != std::string::npos);
  CHECK(r.err.find(") exited with status 7; stopped the other 2 local rank(s)") != std::string::npos);
  CHECK(r.err.find("the last 5 lines of rank 1:\n  line 26\n  line 27\n  line 28\n  line 29\n  line 30\n") !=
        std::string::npos);
  CHECK(r.err.find("  line 25\n") == std::string::npos);
}

TEST_CASE("mixgrad-run reports a rank killed by a signal as 128+signal", "[launcher]") {
  Subprocess p(run_cmd({"--nproc-per-node", "2", "--master-port", "0"}, {"killed", "0"}));
  auto r = p.wait(60);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 128 + SIGKILL);
  CHECK(r.err.find("rank 0 (local rank 0, pid ") != std::string::npos);
  CHECK(r.err.find("was killed by signal 9") != std::string::npos);
  CHECK(r.err.find("  about to die\n") != std::string::npos);
}

TEST_CASE("mixgrad-run forwards SIGTERM to every rank", "[launcher]") {
  const auto r = terminated({"trap"}, {}, 1, 60);
  INFO(r.out << r.err);
  CHECK(count(r.out, "[rank 0] rank 0 got SIGTERM\n") == 1);
  CHECK(count(r.out, "[rank 1] rank 1 got SIGTERM\n") == 1);
  CHECK(r.err.find("mixgrad-run: received Terminated; forwarded it to every rank") != std::string::npos);
}

TEST_CASE("mixgrad-run lets the ranks answer a forwarded signal, and kills them after a second one", "[launcher]") {
  // The ranks take 2 s to "save" after the signal, longer than --grace-seconds: a forwarded signal
  // is no failure, so they are not killed (they were, 5 s after a Ctrl-C, losing the checkpoint).
  const auto answered = terminated({"slow_trap", "2000"}, {"--grace-seconds", "0.5"}, 1, 60);
  INFO(answered.out << answered.err);
  CHECK(count(answered.out, "[rank 0] rank 0 saved\n") == 1);
  CHECK(count(answered.out, "[rank 1] rank 1 saved\n") == 1);
  // A second signal: forwarded too, and the ranks still running the grace period later are killed.
  const auto killed = terminated({"slow_trap", "30000"}, {"--grace-seconds", "0.5"}, 2, 20);
  CHECK(count(killed.out, "saved") == 0);
}

TEST_CASE("mixgrad-run writes each rank's output to --log-dir", "[launcher]") {
  const std::string dir = "mixgrad_run_logs_" + std::to_string(::getpid());
  Subprocess p(run_cmd({"--nproc-per-node", "2", "--master-port", "0", "--log-dir", dir}, {"env"}));
  auto r = p.wait(60);
  REQUIRE(r.status == 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::FILE* f = std::fopen((dir + "/rank_" + std::to_string(rank) + ".log").c_str(), "r");
    REQUIRE(f != nullptr);
    char buf[4096] = {};
    std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    std::string text(buf, n);
    CHECK(text.find("RANK=" + std::to_string(rank) + " LOCAL_RANK=") == 0);
    CHECK(text.find("stderr of rank " + std::to_string(rank) + "\n") != std::string::npos);
    std::remove((dir + "/rank_" + std::to_string(rank) + ".log").c_str());
  }
  ::rmdir(dir.c_str());
}

TEST_CASE("mixgrad-run stops the ranks it started when a later one cannot start", "[launcher]") {
  // rank_1.log is a folder, so rank 1 cannot start after rank 0 did: rank 0 must not be left
  // waiting at the rendezvous (for the whole timeout, holding the port).
  const std::string dir = "mixgrad_run_badlog_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0777);
  ::mkdir((dir + "/rank_1.log").c_str(), 0777);
  const int port = 20000 + int(::getpid() % 20000);
  Subprocess p(run_cmd({"--nproc-per-node", "2", "--master-port", std::to_string(port), "--log-dir", dir,
                        "--grace-seconds", "2"},
                       {"trap"}));
  auto r = p.wait(60);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 2);
  CHECK(r.err.find("mixgrad-run: cannot write " + dir + "/rank_1.log") != std::string::npos);
  CHECK_FALSE(child_running_with_port(port));
  std::remove((dir + "/rank_0.log").c_str());
  ::rmdir((dir + "/rank_1.log").c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("mixgrad-run reports a program that cannot be started", "[launcher]") {
  Subprocess p({MG_RUN, "--nproc-per-node", "2", "--master-port", "0", "/nonexistent/program"});
  auto r = p.wait(60);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 127);
  CHECK(r.err.find("cannot execute '/nonexistent/program': No such file or directory") != std::string::npos);
}

TEST_CASE("mixgrad-run's command line is validated before anything starts", "[launcher]") {
  using mg::launcher::LaunchError;
  using mg::launcher::parse_launch_args;
  auto parse = [](std::vector<const char*> a) {
    a.insert(a.begin(), "mixgrad-run");
    return parse_launch_args(int(a.size()), a.data());
  };
  auto o = parse({"--nproc-per-node=4", "--master-port", "1234", "./train", "--epochs", "3"});
  CHECK(o.nproc_per_node == 4);
  CHECK(o.master_port == 1234);
  CHECK(o.program == "./train");
  CHECK(o.args == std::vector<std::string>{"--epochs", "3"});
  auto o2 = parse({"--nproc-per-node", "1", "--", "--weird-program-name"});
  CHECK(o2.program == "--weird-program-name");
  CHECK_THROWS_WITH(parse({"./train"}), Catch::Contains("--nproc-per-node is required"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "0", "./train"}),
                    Catch::Contains("--nproc-per-node expects an integer in [1, 4096], got '0'"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2"}), Catch::Contains("no program to run"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "x"}),
                    Catch::Contains("--node-rank 2 is not below --nnodes 2"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--nnodes", "2", "--master-port", "0", "x"}),
                    Catch::Contains("--master-port 0 (a free port) works on one machine only"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--output", "fancy", "x"}),
                    Catch::Contains("--output expects prefix or plain"));
  CHECK_THROWS_WITH(parse({"--nproc-per-nod", "2", "x"}), Catch::Contains("unknown flag --nproc-per-nod"));
  // a grace period past a day overflowed the deadline (the ranks were killed at once)
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "2", "--grace-seconds", "1e10", "x"}),
                    Catch::Contains("--grace-seconds expects a number in [0, 86400], got '1e10'"));
  CHECK(parse({"--nproc-per-node", "2", "--grace-seconds", "0.5", "x"}).grace_seconds == 0.5);
  CHECK_THROWS_AS(parse({"--nproc-per-node"}), LaunchError);
  // The same error from the program itself: exit status 2, the message on stderr.
  Subprocess p({MG_RUN, "--nproc-per-node", "two", "x"});
  auto r = p.wait(30);
  CHECK(r.status == 2);
  CHECK(r.err.find("mixgrad-run: --nproc-per-node expects an integer") == 0);
}
