// The CUDA emulator's execution model (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md): a kernel
// launch runs its blocks one after another on the calling host thread, and the threads of a block
// as cooperative fibers, so __syncthreads and the warp shuffles suspend a thread until every
// thread they wait for has arrived — the same results as a GPU for any kernel whose outcome does
// not depend on the order in which independent threads run (which is what a correct kernel is).
// Divergent barriers (threads waiting at different barriers), a shuffle that reads a lane that
// did not take part, and an invalid launch configuration are reported as the GPU would fail
// (a launch error, or a kernel failure surfacing at the next synchronisation), with the reason.
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <string>

namespace mg_emu {

// The order in which the emulator runs a block's runnable threads (each round between barriers)
// and a grid's blocks. A correct kernel computes the same bits in every order; a kernel whose
// threads or blocks communicate without a barrier (a race, or warp-synchronous code without
// __syncwarp) reads garbage or stale values in some order, as it may on a GPU.
//   Forward  thread 0 first, block (0, 0, 0) first (the default);
//   Reverse  the last thread and the last block first;
//   Shuffle  a fresh pseudo-random permutation of the threads each round, and of the blocks,
//            different for every launch (so atomics add in another order each time, as on a GPU);
//            from `seed` and the launch's number since the schedule was set: the same seed
//            repeats a process's orders.
// MG_CUDA_EMULATOR_ORDER=forward|reverse|shuffle[:SEED] sets it for a process (read at the first
// launch; a bad value fails every launch with the reason).
enum class Order { Forward, Reverse, Shuffle };
struct Schedule {
  Order order = Order::Forward;
  unsigned long long seed = 0;
};
// Parses MG_CUDA_EMULATOR_ORDER's text into `out`; "" or why the text is not an order.
std::string parse_schedule(const char* text, Schedule& out);
// The order of later launches of this process (tests set it around a launch; not thread-safe
// against launches running at the same time). Setting it restarts the launch count.
void set_schedule(const Schedule& s);
Schedule schedule();

// The geometry of one launch.
struct LaunchShape {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
};

// Why a launch configuration is invalid ("" when it is valid), as cudaErrorInvalidConfiguration's
// cases on an sm_90 device: empty grid or block, more than 1024 threads per block, a block z above
// 64, a grid y or z above 65535, more than 48 KiB of dynamic shared memory.
std::string invalid_launch_reason(const LaunchShape& s);

// Runs body(arg) once per thread of the grid. Returns "" or why the kernel failed (a divergent
// barrier, a bad shuffle, an exception thrown inside the kernel); a failed block stops the launch.
std::string run_grid(const LaunchShape& s, void (*body)(void*), void* arg);

// The running thread's coordinates (valid only inside run_grid's body).
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

// __syncthreads(): waits until every live thread of the block has arrived.
void sync_threads();
// __syncwarp(mask): waits until every live lane of `mask` in this thread's warp has arrived.
void sync_warp(unsigned mask);
// The shuffles' data movement: every lane of `mask` offers `bytes` bytes of `value`; the caller
// gets lane `src_lane`'s offer (its own when src_lane is outside [0, 32)).
void warp_exchange(unsigned mask, const void* value, void* out, std::size_t bytes, int src_lane);
// Fills a __shared__ variable with 0xff bytes the first time a thread of the running block reaches
// its declaration (launch_rewrite.h adds the call): every block starts with garbage in it.
void poison_shared(void* p, std::size_t bytes);
// The calling thread's lane in its warp (linear thread index within the block, modulo 32).
int lane_id();

}  // namespace mg_emu
