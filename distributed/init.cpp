// init_process_group from the environment (see init.h).
// Decision: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are required (no default that could
// silently join a different job); LOCAL_RANK and LOCAL_WORLD_SIZE default to the single-machine
// values.
#include "mixgrad/distributed/init.h"

#include <cerrno>
#include <cstdlib>

#include "mixgrad/cuda/nccl_comm.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/nccl_process_group.h"

extern char** environ;

namespace mg::distributed {
namespace {

constexpr const char* kHint =
    "\n  hint: start the program with mixgrad-run --nproc-per-node N program args..., which sets "
    "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK";

int parse_int(const std::map<std::string, std::string>& vars, const char* name, int def,
              bool required, int min, int max) {
  auto it = vars.find(name);
  if (it == vars.end()) {
    MG_CHECK(!required, Error, "init_process_group: environment variable ", name, " is not set", kHint);
    return def;
  }
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  MG_CHECK(!s.empty() && end && *end == '\0' && errno == 0 && v >= min && v <= max, Error,
           "init_process_group: ", name, "='", s, "' is not an integer in [", min, ", ", max, "]",
           kHint);
  return int(v);
}

}  // namespace

DistributedEnv env_from(const std::map<std::string, std::string>& vars) {
  DistributedEnv env;
  auto addr = vars.find("MASTER_ADDR");
  MG_CHECK(addr != vars.end() && !addr->second.empty(), Error,
           "init_process_group: environment variable MASTER_ADDR is not set", kHint);
  env.master_addr = addr->second;
  env.master_port = parse_int(vars, "MASTER_PORT", 0, true, 1, 65535);
  env.world_size = parse_int(vars, "WORLD_SIZE", 1, true, 1, 1 << 20);
  env.rank = parse_int(vars, "RANK", 0, true, 0, 1 << 20);
  MG_CHECK(env.rank < env.world_size, Error, "init_process_group: RANK=", env.rank,
           " is not below WORLD_SIZE=", env.world_size, kHint);
  env.local_world_size = parse_int(vars, "LOCAL_WORLD_SIZE", env.world_size, false, 1, env.world_size);
  env.local_rank = parse_int(vars, "LOCAL_RANK", env.rank, false, 0, 1 << 20);
  MG_CHECK(env.local_rank < env.local_world_size, Error, "init_process_group: LOCAL_RANK=",
           env.local_rank, " is not below LOCAL_WORLD_SIZE=", env.local_world_size, kHint);
  return env;
}

DistributedEnv env_from_environment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env_from(vars);
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions options) {
  return init_process_group(env_from_environment(), options);
}

std::shared_ptr<ProcessGroup> init_process_group(const DistributedEnv& env, InitOptions options) {
  const char* built = cuda::nccl_built() ? "gloo, nccl" : "gloo";
  MG_CHECK(options.backend == "gloo" || options.backend == "nccl", NotImplementedError,
           "init_process_group: backend '", options.backend, "' is not available; this build has: ", built);
  if (options.backend == "nccl") {
    // Said before the store starts, so no rank waits for one that cannot come.
    MG_CHECK(cuda::nccl_built(), NotImplementedError, "init_process_group: backend 'nccl' is not available: ",
             cuda::nccl_unavailable_reason(), "\n  hint: use backend 'gloo' (CPU tensors)");
    const std::string why = cuda::nccl_unavailable_reason();
    MG_CHECK(why.empty(), DeviceError, "init_process_group: backend 'nccl' needs a CUDA device: ", why,
             "\n  hint: use backend 'gloo' (CPU tensors) on a machine without GPUs");
    MG_CHECK(env.local_world_size <= cuda::device_count(), DeviceError,
             "init_process_group: backend 'nccl' needs one CUDA device per process, but LOCAL_WORLD_SIZE=",
             env.local_world_size, " and this machine has ", cuda::device_count(), " CUDA device(s)",
             "\n  hint: start at most ", cuda::device_count(), " processes per machine (mixgrad-run --nproc-per-node)");
  }
  auto store = std::make_shared<TcpStore>(TcpStoreOptions{.host = env.master_addr,
                                                          .port = env.master_port,
                                                          .is_server = env.rank == 0,
                                                          .timeout = options.timeout});
  if (options.backend == "nccl") {
    // Device LOCAL_RANK: one device per process on each machine.
    return std::make_shared<ProcessGroupNccl>(store, env.rank, env.world_size,
                                              NcclOptions{.timeout = options.timeout, .device = env.local_rank});
  }
  return std::make_shared<ProcessGroupGloo>(store, env.rank, env.world_size,
                                            GlooOptions{.timeout = options.timeout});
}

}  // namespace mg::distributed
