// The distributed layer in one include: process groups (ProcessGroup, ProcessGroupGloo,
// ProcessGroupNccl), the rendezvous store (TcpStore), init_process_group from the environment,
// the errors, DistributedDataParallel, ZeroRedundantOptimizer, SyncBatchNorm and distributed_sampler.
// Only present when the library was built with Gloo (MG_WITH_GLOO; mixgrad_DISTRIBUTED in the
// package config); docs/distributed.md is the guide.
//
//   #include <mixgrad/distributed/distributed.h>
//   auto pg = mg::distributed::init_process_group();
#pragma once
#include "mixgrad/distributed/ddp.h"
#include "mixgrad/distributed/distributed_sampler.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/gloo_process_group.h"
#include "mixgrad/distributed/init.h"
#include "mixgrad/distributed/nccl_process_group.h"
#include "mixgrad/distributed/process_group.h"
#include "mixgrad/distributed/rank_agreement.h"
#include "mixgrad/distributed/reduce_op.h"
#include "mixgrad/distributed/state_dict_broadcast.h"
#include "mixgrad/distributed/sync_batch_norm.h"
#include "mixgrad/distributed/tcp_store.h"
#include "mixgrad/distributed/zero.h"
