// The process supervisor behind mixgrad-run: starts the local ranks with their environment,
// relays their output, forwards signals and stops the job when one rank fails.
// Decision: each rank runs in its own process group, so a terminal's Ctrl-C reaches the ranks
// once, through the launcher (which forwards SIGINT/SIGTERM to each group), and stopping a rank
// also stops the processes it started. A failing rank (non-zero exit or killed by a signal)
// makes the launcher send SIGTERM to the others, then SIGKILL after the grace period; the exit
// status is the failing rank's (128+signal when a signal killed it).
//
//   int status = mg::launcher::run_job(parse_launch_args(argc, argv));
#pragma once
#include "launcher/launch_options.h"

namespace mg::launcher {

// Runs the job to completion and returns the launcher's exit status: 0 when every rank exited
// with 0; the first failing rank's status; 128+signal when the launcher itself got SIGINT or
// SIGTERM. Throws LaunchError when the processes cannot be started (pipes, log folder).
int run_job(const LaunchOptions& options);

}  // namespace mg::launcher
