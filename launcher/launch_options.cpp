// Parsing mixgrad-run's command line (see launch_options.h).
// Decision: a small parser of its own rather than examples/common's Flags: the launcher must stop
// at the first positional argument and hand the rest to the program verbatim.
#include "launcher/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace mg::launcher {
namespace {

constexpr const char* kHint = "\n  hint: mixgrad-run --help lists the flags";

int64_t to_int(const std::string& flag, const std::string& v, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  MG_CHECK(!v.empty() && *end == '\0' && errno == 0 && x >= min && x <= max, launcher::LaunchError,
           "mixgrad-run: --", flag, " expects an integer in [", min, ", ", max, "], got '", v, "'",
           kHint);
  return x;
}

double to_double(const std::string& flag, const std::string& v, double min, double max) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  MG_CHECK(!v.empty() && *end == '\0' && std::isfinite(x) && x >= min && x <= max, launcher::LaunchError,
           "mixgrad-run: --", flag, " expects a number in [", min, ", ", max, "], got '", v, "'", kHint);
  return x;
}

}  // namespace

std::string launch_usage() {
  return "usage: mixgrad-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A "
         "--master-port P] [options] [--] program args...\n"
         "Starts N copies of `program` on this machine with MASTER_ADDR, MASTER_PORT, RANK,\n"
         "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and NODE_RANK set, and supervises them.\n"
         "  --nproc-per-node N   processes on this machine (required)\n"
         "  --nnodes M           machines in the job (default 1)\n"
         "  --node-rank R        this machine's index in [0, M) (default 0)\n"
         "  --master-addr A      address of the machine hosting rank 0 (default 127.0.0.1)\n"
         "  --master-port P      its rendezvous port (default 29500; 0: a free port, one machine only)\n"
         "  --output MODE        prefix: '[rank R] ' before each line (default); plain: unchanged\n"
         "  --log-dir DIR        also write each rank's output to DIR/rank_R.log\n"
         "  --grace-seconds S    SIGTERM to SIGKILL delay when stopping processes (default 5)\n"
         "  --tail-lines K       lines of a failing rank's output repeated at the end (default 20)\n"
         "SIGINT and SIGTERM are forwarded to every process. When one exits with an error, the\n"
         "others are stopped and mixgrad-run exits with its status (128+signal if it was killed).\n";
}

LaunchOptions parse_launch_args(int argc, const char* const* argv) {
  LaunchOptions o;
  bool have_nproc = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.rfind("--", 0) != 0) break;  // the program
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (name == "help") {
      o.help = true;
      return o;
    }
    static const char* kFlags[] = {"nproc-per-node", "nnodes",    "node-rank",     "master-addr",
                                   "master-port",    "output",    "log-dir",       "grace-seconds",
                                   "tail-lines"};
    bool known = false;
    for (const char* f : kFlags) known = known || name == f;
    MG_CHECK(known, launcher::LaunchError, "mixgrad-run: unknown flag --", name, kHint);
    if (!inline_value) {
      MG_CHECK(i + 1 < argc, launcher::LaunchError, "mixgrad-run: --", name, " needs a value", kHint);
      value = argv[++i];
    }
    if (name == "nproc-per-node") {
      o.nproc_per_node = int(to_int(name, value, 1, 4096));
      have_nproc = true;
    } else if (name == "nnodes") {
      o.nnodes = int(to_int(name, value, 1, 1 << 16));
    } else if (name == "node-rank") {
      o.node_rank = int(to_int(name, value, 0, 1 << 16));
    } else if (name == "master-addr") {
      MG_CHECK(!value.empty(), launcher::LaunchError, "mixgrad-run: --master-addr is empty", kHint);
      o.master_addr = value;
    } else if (name == "master-port") {
      o.master_port = int(to_int(name, value, 0, 65535));
    } else if (name == "output") {
      MG_CHECK(value == "prefix" || value == "plain", launcher::LaunchError,
               "mixgrad-run: --output expects prefix or plain, got '", value, "'", kHint);
      o.prefix_output = value == "prefix";
    } else if (name == "log-dir") {
      o.log_dir = value;
    } else if (name == "grace-seconds") {
      // At most a day: the deadline is a steady_clock time point, which 1e10 s overflowed (the
      // processes were then killed at once instead of after the grace).
      o.grace_seconds = to_double(name, value, 0, 86400);
    } else if (name == "tail-lines") {
      o.tail_lines = int(to_int(name, value, 0, 100000));
    }
  }
  MG_CHECK(have_nproc, launcher::LaunchError, "mixgrad-run: --nproc-per-node is required", kHint);
  MG_CHECK(o.node_rank < o.nnodes, launcher::LaunchError, "mixgrad-run: --node-rank ", o.node_rank,
           " is not below --nnodes ", o.nnodes, kHint);
  MG_CHECK(o.master_port != 0 || o.nnodes == 1, launcher::LaunchError,
           "mixgrad-run: --master-port 0 (a free port) works on one machine only; with --nnodes ",
           o.nnodes, " every machine must be given the same port", kHint);
  MG_CHECK(i < argc, launcher::LaunchError, "mixgrad-run: no program to run", kHint);
  o.program = argv[i++];
  for (; i < argc; ++i) o.args.push_back(argv[i]);
  return o;
}

}  // namespace mg::launcher
