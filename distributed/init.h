// init_process_group: joins the job described by the environment, the way torchrun and
// mixgrad-run describe it:
//   MASTER_ADDR, MASTER_PORT  where rank 0 hosts the rendezvous store
//   RANK, WORLD_SIZE          this process's rank in [0, WORLD_SIZE)
//   LOCAL_RANK                its rank on this machine (optional; defaults to RANK)
//   LOCAL_WORLD_SIZE          processes on this machine (optional; defaults to WORLD_SIZE)
// Decision: a missing or malformed variable is an mg::Error naming it and what was found, with a
// hint to use mixgrad-run, never a default that could join the wrong job.
//
//   auto pg = mg::distributed::init_process_group({.timeout = std::chrono::seconds(120)});
//   if (pg->rank() == 0) std::cout << "world " << pg->world_size() << "\n";
#pragma once
#include <map>
#include <memory>
#include <string>

#include "mixgrad/distributed/gloo_process_group.h"

namespace mg::distributed {

struct DistributedEnv {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

// Reads the variables above from `vars` (for tests) or from the process environment.
DistributedEnv env_from(const std::map<std::string, std::string>& vars);
DistributedEnv env_from_environment();

struct InitOptions {
  // "gloo" (CPU tensors) or "nccl" (CUDA tensors, on device LOCAL_RANK; needs a build with NCCL
  // and one CUDA device per process on each machine).
  std::string backend = "gloo";
  // Bound of the rendezvous and of every collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// Creates the store (hosted by rank 0) and the process group. Throws NotImplementedError for an
// unknown backend or "nccl" in a build without NCCL, DeviceError for "nccl" without enough CUDA
// devices, DistributedTimeoutError when peers do not arrive in time.
std::shared_ptr<ProcessGroup> init_process_group(InitOptions options = {});
std::shared_ptr<ProcessGroup> init_process_group(const DistributedEnv& env, InitOptions options = {});

}  // namespace mg::distributed
