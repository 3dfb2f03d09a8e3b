// broadcast_state_dict: one rank's StateDict (integers, floats, strings, tensors) sent to every
// rank of a group, as torch.distributed.broadcast_object_list does for a state dict — the piece a
// sharded optimizer's consolidated state dict is gathered with (distributed/zero.h).
//
// Decision: no pickling. The root writes a compact binary header (every key, integer, float bit
// pattern, string and each tensor's dtype and shape, length-prefixed so any bytes are allowed),
// which travels as one u8 tensor after its length; then the tensors of each dtype travel as one
// flat tensor. So a dict costs 2 + (number of dtypes) broadcasts whatever its size, and the
// receivers know every shape before any tensor data arrives.
//
//   mg::StateDict full = broadcast_state_dict(*pg, owner ? local : mg::StateDict{}, owner_rank, device);
#pragma once
#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/process_group.h"

namespace mg::distributed {

// Collective: every rank of `group` calls it with the same `root` and `device` (the device the
// group communicates on: the CPU for Gloo, the rank's CUDA device for NCCL). Root's `state` is
// sent; the others' is ignored. Returns root's dict on every rank: the same keys, values and
// tensor order, each tensor a new contiguous one on `device` with the same dtype, shape and bits
// (on the root too: copies, never the root's own tensors). An undefined tensor in root's dict is
// refused on every rank (the root throws its error, the others a DistributedError naming it).
StateDict broadcast_state_dict(ProcessGroup& group, const StateDict& state, int root, Device device);

}  // namespace mg::distributed
