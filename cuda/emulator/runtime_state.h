// The CUDA emulator runtime's shared state (MG_WITH_CUDA=EMULATE; internal to cuda/emulator/):
// the objects behind the runtime's handles, the process-wide tables and the sticky error, and
// the helpers its three parts share — cudart.cpp (the API and the capture rules),
// guarded_memory.cpp (device allocations between guard pages) and deferred_streams.cpp (stream
// work queued and run as late as the program allows). Everything here is touched with g_mutex
// held: one emulated operation at a time, process-wide.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mixgrad/cuda/emulator/grid_runner.h"

namespace mg_emu::rt {

struct Node {
  enum Kind { Kernel, Copy, Fill, Task } kind = Kernel;
  LaunchShape shape;
  void (*body)(void*) = nullptr;
  void (*destroy)(void*) = nullptr;
  void* arg = nullptr;  // owned
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
  std::shared_ptr<std::function<void()>> task;
};

struct StreamObject;
struct EventObject;
struct GraphObject;

// One queued piece of a stream's work (deferred streams): an operation (a node, or a whole graph
// launch), an event's record, or a wait until another stream has run `position` of its items.
struct Work {
  enum Kind { Run, Record, Wait } kind = Run;
  Node node;                           // Run: owns node.arg (node.destroy)
  std::shared_ptr<GraphObject> graph;  // Run: a graph launch instead of the node
  std::vector<char> staged;            // Run: a copy's pageable source, read at submission
  EventObject* event = nullptr;        // Record
  StreamObject* after = nullptr;       // Wait
  uint64_t position = 0;               // Wait
};

struct GraphObject {
  std::vector<Node> nodes;
  bool capturing = true;                // until its capture ends
  std::vector<StreamObject*> members;   // the capturing stream and the streams forked into it
  ~GraphObject() {
    for (Node& n : nodes) {
      if (n.destroy != nullptr) n.destroy(n.arg);
    }
  }
};

struct ExecObject {
  std::shared_ptr<GraphObject> graph;
};

struct StreamObject {
  int device = 0;
  bool legacy = false;
  std::shared_ptr<GraphObject> capture;  // while capturing
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  StreamObject* origin = nullptr;  // a stream joined into another stream's capture
  // Deferred streams: the queued work, how many items were ever queued and run.
  bool blocking = false;  // made without cudaStreamNonBlocking: ordered with the legacy stream
  std::deque<Work> queue;
  uint64_t enqueued = 0, executed = 0;
  bool running = false;
};

struct EventObject {
  int device = 0;
  bool timing = true;
  bool recorded = false;
  double ms = 0;
  std::shared_ptr<GraphObject> captured;  // recorded inside a capture
  StreamObject* capture_stream = nullptr;
  // Deferred streams: the last record is done when `stream` has run `position` items. A record
  // still queued keeps a destroyed event alive until it runs.
  StreamObject* stream = nullptr;
  uint64_t position = 0, serial = 0, told_not_ready = 0;
  int pending = 0;
  bool destroyed = false;
};

struct Allocation {
  std::size_t bytes = 0;    // as asked for: copies and library operands must stay inside
  bool host = false;
  int device = 0;
  std::size_t rounded = 0;  // counted against the device's memory (bytes rounded up to 256)
  char* map = nullptr;      // device memory: its mapping, guard pages included
  std::size_t map_bytes = 0;
};

// ---- Process-wide state (defined in cudart.cpp) ----
extern std::recursive_mutex g_mutex;  // one emulated operation at a time, process-wide
extern std::map<uintptr_t, Allocation> g_allocations;
extern std::vector<std::size_t> g_device_bytes;
extern std::vector<StreamObject*> g_captures;  // streams whose capture is in progress
extern std::vector<StreamObject*> g_streams;   // made by cudaStreamCreateWithFlags (never destroyed here)
extern uint64_t g_record_serial;               // numbers event records (deferred streams)
extern cudaError_t g_sticky;                   // a device fault: every later call returns it
extern std::string g_sticky_reason;
extern thread_local cudaError_t t_last;
extern thread_local int t_device;
extern thread_local cudaStreamCaptureMode t_mode;

// ---- Helpers (cudart.cpp) ----
int env_int(const char* name, int fallback);
int device_count();
std::size_t device_memory();
double now_ms();
cudaError_t fail(cudaError_t e);  // records e as the thread's last error and returns it
StreamObject* legacy_stream(int device);
StreamObject* stream_of(cudaStream_t s);
bool prohibited();                        // whether this thread may not make an unsafe call now
bool forbids(const StreamObject* s);      // whether capture s forbids this thread's unsafe calls
cudaError_t unsafe_call();                // a prohibited call: fails, invalidating the captures
void run_node(const Node& n);
bool is_device_range(const void* p, std::size_t bytes);  // inside one device allocation

// ---- Guarded device memory (guarded_memory.cpp) ----
// The start of `placed` bytes at the end of a fresh mapping, 0xff-filled, between two
// inaccessible pages (a.map, a.map_bytes set); nullptr when the host has no memory for it.
char* map_guarded(std::size_t placed, Allocation& a);
// Where a kernel wrote into the 0xff bytes around the allocation at `p`: "" when nowhere.
std::string overwritten_guard_bytes(uintptr_t p, const Allocation& a);
// Unmaps a's mapping and remembers it, so that a later fault there is named a use after free.
void unmap_freed(const Allocation& a);

// ---- Deferred streams (deferred_streams.cpp) ----
// MG_CUDA_EMULATOR_STREAMS as 0 (immediate), 1 (deferred) or -1 (a bad value); tests set it.
int& stream_mode();
bool deferred_streams();  // whether work is queued (a bad value becomes a sticky failure)
void run_until(StreamObject* s, uint64_t position);  // runs s's queue until `position` items ran
void run_all();
void enqueue(StreamObject* s, Work w);  // after what it must follow by the legacy stream's rule
bool is_pinned_range(const void* p, std::size_t bytes);  // inside one pinned host allocation
// Runs `n` now, or records it when `stream` is being captured (taking ownership of n.arg), or
// queues it on a deferred stream (taking ownership too). `staged`: a copy's pageable source,
// whose bytes the runtime reads before returning; `blocking`: the call returns only when the
// operation is done (a copy into pageable host memory).
cudaError_t submit(cudaStream_t stream, Node n, bool staged = false, bool blocking = false);

}  // namespace mg_emu::rt
