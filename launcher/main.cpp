// mixgrad-run: launches a distributed mixgrad program on this machine, like torchrun.
//   mixgrad-run --nproc-per-node 2 ./train --epochs 3
// Decision: all logic lives in launch_options.* and supervisor.*; main only maps errors to exit
// status 2 (bad command line or start-up failure).
#include <iostream>

#include "launcher/launch_options.h"
#include "launcher/supervisor.h"

int main(int argc, char** argv) {
  try {
    mg::launcher::LaunchOptions o = mg::launcher::parse_launch_args(argc, argv);
    if (o.help) {
      std::cout << mg::launcher::launch_usage();
      return 0;
    }
    return mg::launcher::run_job(o);
  } catch (const mg::Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
