// The command line of mixgrad-run, parsed and validated:
//   mixgrad-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//               [--output prefix|plain] [--log-dir DIR] [--grace-seconds S] [--tail-lines K]
//               [--] program args...
// Flags take `--name value` or `--name=value`; the first argument that is not a flag (or the
// one after `--`) is the program, and everything after it is passed to the program untouched.
// Decision: every flag is checked before any process starts (ranges, --node-rank < --nnodes,
// --master-port 0 only on one node), and a mistake is a LaunchError whose message starts with
// "mixgrad-run:" and ends with a hint; main() prints it and exits 2.
//
//   LaunchOptions o = parse_launch_args(argc, argv);   // o.program = "./train", o.nproc_per_node = 2
#pragma once
#include <string>
#include <vector>

#include "core/error.h"

namespace mg::launcher {

class LaunchError : public Error {
  using Error::Error;
};

struct LaunchOptions {
  int nproc_per_node = 0;   // required, >= 1
  int nnodes = 1;
  int node_rank = 0;        // in [0, nnodes)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: pick a free port (single node only)
  bool prefix_output = true;  // "[rank R] " before every line (--output prefix; plain: as is)
  std::string log_dir;        // also write rank R's output to DIR/rank_R.log
  double grace_seconds = 5;   // SIGTERM -> SIGKILL delay when stopping the processes
  int tail_lines = 20;        // lines of the failing rank's output repeated at the end
  bool help = false;
  std::string program;
  std::vector<std::string> args;  // the program's arguments
};

// Throws LaunchError. `--help` sets help and skips the other checks.
LaunchOptions parse_launch_args(int argc, const char* const* argv);
// The usage text --help prints.
std::string launch_usage();

}  // namespace mg::launcher
