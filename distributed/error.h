// Errors of the distributed layer. A collective or rendezvous that fails throws one of these
// (never hangs past its timeout, never returns a partial result silently).
// Decision: a timeout is its own class, so a launcher or a test can tell "a peer never came /
// went silent" (DistributedTimeoutError) from "a peer's connection broke" (DistributedError).
//
//   try { pg->all_reduce(t); } catch (const mg::distributed::DistributedTimeoutError& e) { ... }
#pragma once
#include "mixgrad/core/error.h"

namespace mg::distributed {

// A collective, the store or the rendezvous failed: a peer closed its connection (died), the
// store is unreachable, or the process group was used after a failure or shutdown.
class DistributedError : public Error {
  using Error::Error;
};

// A peer did not arrive or did not answer within the configured timeout; the message names the
// missing rank(s) where they are known and the timeout.
class DistributedTimeoutError : public DistributedError {
  using DistributedError::DistributedError;
};

}  // namespace mg::distributed
