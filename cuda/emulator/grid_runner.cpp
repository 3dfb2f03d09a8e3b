// Blocks one after another, threads of a block as fibers (grid_runner.h). A fiber runs until it
// finishes or waits at a barrier; when every live thread a barrier names has arrived the scheduler
// releases them. Stacks are mapped once per host thread and reused by every launch.
// Decision: a fiber starts with makecontext/setcontext and every later switch is _setjmp/_longjmp:
// swapcontext saves and restores the signal mask with a system call per switch, which made the
// barrier-heavy kernels (block reductions) spend most of their time in the kernel; _longjmp does
// not touch the mask. A fiber never returns from its function: it jumps back to the scheduler.
// _FORTIFY_SOURCE's longjmp check refuses a jump to another stack, so it is off in this file.
#undef _FORTIFY_SOURCE
#include "mixgrad/cuda/emulator/grid_runner.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace mg_emu {
namespace {

// 256 KiB per thread: kernels keep small arrays on the stack; pages are committed when touched.
constexpr std::size_t kStackBytes = std::size_t(256) << 10;
constexpr int kWarp = 32;

enum class Wait { Running, Block, Warp, Done };

struct Fiber {
  ucontext_t context;  // the first entry
  jmp_buf resume;      // where a suspended fiber continues
  bool started = false;
  uint3 tid;
  Wait wait = Wait::Running;
  unsigned warp_mask = 0;
};

struct Block {
  LaunchShape shape;
  uint3 bid;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  std::vector<Fiber> fibers;
  jmp_buf scheduler;
  int current = -1;
  std::string failure;
  // Shuffle slots: 16 bytes per lane, stamped with the warp's barrier round at the write.
  std::vector<std::array<unsigned char, 16>> slots;
  std::vector<uint64_t> slot_round, warp_round;
  std::vector<const void*> poisoned;  // the __shared__ variables this block has filled
};

thread_local Block* t_block = nullptr;

// SplitMix64: a small, good generator for the shuffles (the same seed, the same order everywhere).
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The schedule of later launches: MG_CUDA_EMULATOR_ORDER's, read at the first launch, unless
// set_schedule came first. `error` fails every launch while the variable's text is bad.
// `launches` counts the launches since then: a shuffled launch draws its order from the seed and
// its number, so two launches of one kernel run in different orders (atomics then add in another
// order each time, as on a GPU), and a process with the same seed repeats all of them.
struct ScheduleState {
  std::mutex mutex;
  bool loaded = false;
  Schedule schedule;
  std::string error;
  uint64_t launches = 0;
};

ScheduleState& schedule_state() {
  static ScheduleState s;
  return s;
}

// The schedule now (reading the variable at the first call); `error` gets why its text is bad.
// With `for_launch`, a shuffled schedule's seed becomes this launch's own.
Schedule current_schedule(std::string& error, bool for_launch) {
  ScheduleState& st = schedule_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.loaded) {
    st.loaded = true;
    st.error = parse_schedule(std::getenv("MG_CUDA_EMULATOR_ORDER"), st.schedule);
  }
  error = st.error;
  Schedule s = st.schedule;
  if (for_launch && s.order == Order::Shuffle) {
    uint64_t state = s.seed ^ (st.launches++ * 0xd1342543de82ef95ull);
    s.seed = next_random(state);
  }
  return s;
}


// The order in which one round runs the block's threads: `order` gets 0..n-1 permuted.
void order_threads(std::vector<std::size_t>& order, std::size_t n, const Schedule& s, uint64_t& rng) {
  order.resize(n);
  std::iota(order.begin(), order.end(), std::size_t(0));
  if (s.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (s.order == Order::Shuffle) {
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[next_random(rng) % i]);
  }
}

// The blocks' order as a bijection of their linear index (x fastest): i -> a * i + c mod n with a
// coprime to n for Shuffle (no table: a grid may have billions of blocks).
struct BlockOrder {
  uint64_t n = 1, a = 1, c = 0;
  bool reverse = false;
  BlockOrder(uint64_t blocks, const Schedule& s) : n(blocks), reverse(s.order == Order::Reverse) {
    if (s.order != Order::Shuffle || n < 2) return;
    uint64_t rng = s.seed ^ 0x5bd1e995ull;
    a = next_random(rng) % n;
    while (std::gcd(a, n) != 1) a = a + 1 == n ? 1 : a + 1;
    c = next_random(rng) % n;
  }
  uint64_t operator()(uint64_t i) const {
    if (reverse) return n - 1 - i;
    return uint64_t((static_cast<unsigned __int128>(a) * i + c) % n);
  }
};
thread_local std::vector<void*> t_stacks;

void* stack_for(std::size_t i) {
  while (t_stacks.size() <= i) {
    void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("CUDA emulator: cannot map a fiber stack");
    mprotect(p, 4096, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting a neighbour
    t_stacks.push_back(p);
  }
  return t_stacks[i];
}

std::string where(const Block& b) {
  return "block (" + std::to_string(b.bid.x) + ", " + std::to_string(b.bid.y) + ", " + std::to_string(b.bid.z) + ")";
}

// A fiber runs its thread of every block of the launch: after each block it waits, Done, until
// the scheduler resumes it for the next one (so a fiber starts once per launch, not per block).
void fiber_main() {
  Block& b = *t_block;
  const std::size_t me = std::size_t(b.current);
  for (;;) {
    try {
      b.body(b.arg);
    } catch (const std::exception& e) {
      if (b.failure.empty()) b.failure = std::string("exception in a kernel thread: ") + e.what();
    } catch (...) {
      if (b.failure.empty()) b.failure = "exception in a kernel thread";
    }
    b.fibers[me].wait = Wait::Done;
    if (_setjmp(b.fibers[me].resume) == 0) _longjmp(b.scheduler, 1);  // back to the scheduler
  }
}

Fiber& running() { return t_block->fibers[std::size_t(t_block->current)]; }

void suspend(Wait why, unsigned mask) {
  Block& b = *t_block;
  Fiber& f = running();
  f.wait = why;
  f.warp_mask = mask;
  if (_setjmp(f.resume) == 0) _longjmp(b.scheduler, 1);
}

// Releases the barriers whose threads have all arrived; false when none could be released.
bool release_barriers(Block& b) {
  bool released = false;
  int live = 0, at_block = 0;
  for (const Fiber& f : b.fibers) {
    if (f.wait != Wait::Done) ++live;
    if (f.wait == Wait::Block) ++at_block;
  }
  if (live > 0 && at_block == live) {
    for (Fiber& f : b.fibers) {
      if (f.wait == Wait::Block) f.wait = Wait::Running;  // exited threads stay exited
    }
    return true;
  }
  const int n = int(b.fibers.size());
  for (int w0 = 0; w0 < n; w0 += kWarp) {
    unsigned mask = 0;
    bool any = false;
    for (int i = w0; i < std::min(n, w0 + kWarp); ++i) {
      if (b.fibers[std::size_t(i)].wait == Wait::Warp) mask |= b.fibers[std::size_t(i)].warp_mask, any = true;
    }
    if (!any) continue;
    bool complete = true;
    for (int lane = 0; lane < kWarp && complete; ++lane) {
      if (!((mask >> lane) & 1u) || w0 + lane >= n) continue;
      const Wait w = b.fibers[std::size_t(w0 + lane)].wait;
      complete = w == Wait::Warp || w == Wait::Done;
    }
    if (!complete) continue;
    for (int i = w0; i < std::min(n, w0 + kWarp); ++i) {
      if (b.fibers[std::size_t(i)].wait == Wait::Warp) b.fibers[std::size_t(i)].wait = Wait::Running;
    }
    ++b.warp_round[std::size_t(w0 / kWarp)];
    released = true;
  }
  return released;
}

std::string deadlock_text(const Block& b) {
  int at_block = 0, at_warp = 0, done = 0;
  for (const Fiber& f : b.fibers) {
    at_block += f.wait == Wait::Block;
    at_warp += f.wait == Wait::Warp;
    done += f.wait == Wait::Done;
  }
  return "divergent barriers in " + where(b) + ": " + std::to_string(at_block) + " threads wait at __syncthreads, " +
         std::to_string(at_warp) + " at a warp barrier or shuffle, " + std::to_string(done) +
         " have exited (a GPU hangs or computes garbage here)";
}

// The fibers of a launch, one per thread of a block, not yet started.
void make_fibers(Block& b) {
  const std::size_t threads = std::size_t(b.shape.block.x) * b.shape.block.y * b.shape.block.z;
  b.fibers.assign(threads, Fiber{});
  const std::size_t warps = (threads + kWarp - 1) / kWarp;
  b.slots.assign(warps * kWarp, {});
  for (std::size_t i = 0; i < threads; ++i) {
    Fiber& f = b.fibers[i];
    f.tid = uint3{unsigned(i % b.shape.block.x), unsigned(i / b.shape.block.x % b.shape.block.y),
                  unsigned(i / (std::size_t(b.shape.block.x) * b.shape.block.y))};
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = static_cast<char*>(stack_for(i)) + 4096;
    f.context.uc_stack.ss_size = kStackBytes - 4096;
    f.context.uc_link = nullptr;
    f.started = false;
    makecontext(&f.context, fiber_main, 0);
  }
}

std::string run_block(Block& b, const Schedule& schedule, uint64_t block_number) {
  const std::size_t threads = b.fibers.size();
  for (Fiber& f : b.fibers) f.wait = Wait::Running;
  b.poisoned.clear();
  b.slot_round.assign(threads + kWarp, ~uint64_t(0));
  b.warp_round.assign((threads + kWarp - 1) / kWarp, 0);
  uint64_t rng = schedule.seed ^ (block_number * 0x2545f4914f6cdd1dull);
  std::vector<std::size_t> order;
  for (;;) {
    bool done = true;
    order_threads(order, threads, schedule, rng);
    for (const std::size_t i : order) {
      if (b.fibers[i].wait != Wait::Running) {
        done = done && b.fibers[i].wait == Wait::Done;
        continue;
      }
      b.current = int(i);
      Fiber& f = b.fibers[i];
      if (_setjmp(b.scheduler) == 0) {
        if (!f.started) {
          f.started = true;
          setcontext(&f.context);
        }
        _longjmp(f.resume, 1);
      }
      if (!b.failure.empty()) return b.failure + " (" + where(b) + ")";
      done = done && b.fibers[i].wait == Wait::Done;
    }
    if (done) return "";
    if (!release_barriers(b)) return deadlock_text(b);
  }
}

}  // namespace

std::string invalid_launch_reason(const LaunchShape& s) {
  const uint64_t threads = uint64_t(s.block.x) * s.block.y * s.block.z;
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0) return "an empty grid";
  if (threads == 0) return "an empty block";
  if (threads > 1024) return std::to_string(threads) + " threads per block (at most 1024)";
  if (s.block.x > 1024 || s.block.y > 1024 || s.block.z > 64) return "a block dimension above its limit (1024, 1024, 64)";
  if (s.grid.x > 2147483647u || s.grid.y > 65535 || s.grid.z > 65535) return "a grid dimension above its limit";
  if (s.shared_bytes > 48 * 1024) return "more than 48 KiB of dynamic shared memory";
  return "";
}

std::string run_grid(const LaunchShape& s, void (*body)(void*), void* arg) {
  if (t_block != nullptr) return "a kernel launched from inside a kernel (not emulated)";
  Block b;
  b.shape = s;
  b.body = body;
  b.arg = arg;
  t_block = &b;
  struct Reset {
    ~Reset() { t_block = nullptr; }
  } reset;  // also when make_fibers throws
  std::string bad_order;
  const Schedule order = current_schedule(bad_order, /*for_launch=*/true);
  if (!bad_order.empty()) return bad_order;
  make_fibers(b);
  const uint64_t gx = s.grid.x, gy = s.grid.y, blocks = gx * gy * s.grid.z;
  const BlockOrder block_order(blocks, order);
  std::string failure;
  for (uint64_t i = 0; i < blocks && failure.empty(); ++i) {
    const uint64_t linear = block_order(i);
    b.bid = uint3{unsigned(linear % gx), unsigned(linear / gx % gy), unsigned(linear / (gx * gy))};
    failure = run_block(b, order, linear);
  }
  return failure;
}

std::string parse_schedule(const char* text, Schedule& out) {
  const std::string t = text == nullptr ? "" : text;
  Schedule s;
  if (t.empty() || t == "forward") {
    s.order = Order::Forward;
  } else if (t == "reverse") {
    s.order = Order::Reverse;
  } else if (t.rfind("shuffle", 0) == 0 && (t.size() == 7 || t[7] == ':')) {
    s.order = Order::Shuffle;
    if (t.size() > 7) {
      const std::string digits = t.substr(8);
      char* end = nullptr;
      s.seed = std::strtoull(digits.c_str(), &end, 10);
      if (digits.empty() || *end != '\0' || digits[0] == '-') {
        return "MG_CUDA_EMULATOR_ORDER=" + t + ": the seed after 'shuffle:' must be a non-negative integer";
      }
    }
  } else {
    return "MG_CUDA_EMULATOR_ORDER=" + t + ": expected forward, reverse, shuffle or shuffle:SEED";
  }
  out = s;
  return "";
}

void set_schedule(const Schedule& s) {
  ScheduleState& st = schedule_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  st.loaded = true;
  st.error.clear();
  st.schedule = s;
  st.launches = 0;
}

Schedule schedule() {
  std::string ignored;
  return current_schedule(ignored, /*for_launch=*/false);
}

const uint3& thread_idx() { return running().tid; }
const uint3& block_idx() { return t_block->bid; }
const dim3& block_dim() { return t_block->shape.block; }
const dim3& grid_dim() { return t_block->shape.grid; }

int lane_id() { return t_block->current % kWarp; }

void sync_threads() { suspend(Wait::Block, 0); }

void poison_shared(void* p, std::size_t bytes) {
  Block& b = *t_block;
  if (std::find(b.poisoned.begin(), b.poisoned.end(), p) != b.poisoned.end()) return;
  b.poisoned.push_back(p);
  std::memset(p, 0xff, bytes);
}

void sync_warp(unsigned mask) { suspend(Wait::Warp, mask | (1u << lane_id())); }

void warp_exchange(unsigned mask, const void* value, void* out, std::size_t bytes, int src_lane) {
  Block& b = *t_block;
  if (bytes > 16) throw std::logic_error("CUDA emulator: a shuffle of more than 16 bytes");
  const int self = b.current, lane = self % kWarp, warp = self / kWarp;
  const uint64_t round = b.warp_round[std::size_t(warp)];
  std::memcpy(b.slots[std::size_t(self)].data(), value, bytes);
  b.slot_round[std::size_t(self)] = round;
  sync_warp(mask);
  if (src_lane < 0 || src_lane >= kWarp || src_lane == lane) {
    std::memcpy(out, value, bytes);
  } else {
    const std::size_t src = std::size_t(warp * kWarp + src_lane);
    if (!((mask >> src_lane) & 1u) || src >= b.fibers.size() || b.slot_round[src] != round) {
      if (b.failure.empty()) {
        b.failure = "lane " + std::to_string(lane) + " of warp " + std::to_string(warp) + " read lane " +
                    std::to_string(src_lane) + " in a shuffle that lane did not take part in (undefined on a GPU)";
      }
      std::memcpy(out, value, bytes);
    } else {
      std::memcpy(out, b.slots[src].data(), bytes);
    }
  }
  sync_warp(mask);  // every lane has read before any lane's next shuffle overwrites its slot
}

}  // namespace mg_emu
