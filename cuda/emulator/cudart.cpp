// The CUDA runtime API on the CPU (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md): the subset of
// libcudart that cuda/ calls, with the GPU's observable behaviour where the backend depends on it.
// - Device memory is host memory, filled with 0xff bytes when allocated (NaN in every float dtype,
//   -1 in the integers), so a kernel that reads memory nobody wrote shows it; the emulated
//   devices have MG_CUDA_EMULATOR_MEMORY_MB of memory (default 16384) and cudaMalloc fails beyond.
// - Each device allocation is a mapping of its own between two pages nobody may touch, its end
//   rounded up to 16 bytes against the second: a kernel that reads or writes past an allocation
//   faults at once, and the fault handler names the allocation (or the freed one) first; the
//   bytes between the request's end and the guard, and before its start, must still hold 0xff at
//   cudaFree, else the write past the end becomes a kernel failure. With the caching allocator off
//   (MG_CUDA_CACHING_ALLOCATOR=0) an allocation is one tensor, so this checks every kernel's bounds.
// - Every stream runs its work when it is submitted, one launch at a time process-wide, so
//   streams, events and synchronisation are trivially ordered; event times are host times.
//   MG_CUDA_EMULATOR_STREAMS=deferred instead queues each stream's work and runs it as late as
//   the program allows: at a synchronisation (stream, event, device, a blocking copy, cudaFree),
//   when another stream waits on one of its events, or at the second query of an unfinished event
//   (the first says cudaErrorNotReady). A stream that reads what another stream writes without
//   waiting on its event, or a host that reads a pinned buffer before synchronising, then sees the
//   old bytes, as on a GPU that is slow to get there.
// - Stream capture records kernels, copies and fills into a graph that cudaGraphLaunch replays,
//   with the runtime's capture rules: no capture on the legacy stream, a synchronising or
//   allocating call from a thread the capture mode prohibits fails with
//   cudaErrorStreamCaptureUnsupported and invalidates the capture.
// - A kernel that fails (grid_runner.h) makes every later call return cudaErrorLaunchFailure, as a
//   device fault does; the reason is printed to stderr once.
//
// The state these share, and the guarded memory and deferred streams, live in runtime_state.h,
// guarded_memory.cpp and deferred_streams.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mixgrad/cuda/emulator/device_side.h"
#include "mixgrad/cuda/emulator/emulator.h"
#include "mixgrad/cuda/emulator/runtime_state.h"

namespace mg_emu::rt {

std::recursive_mutex g_mutex;  // one emulated operation at a time, process-wide
std::map<uintptr_t, Allocation> g_allocations;
std::vector<std::size_t> g_device_bytes;
std::vector<StreamObject*> g_captures;  // streams whose capture is in progress
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_reason;
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;
std::vector<StreamObject*> g_streams;
uint64_t g_record_serial = 0;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int device_count() {
  static const int n = std::max(0, env_int("MG_CUDA_EMULATOR_DEVICES", 1));
  return n;
}

std::size_t device_memory() {
  static const std::size_t bytes = std::size_t(std::max(1, env_int("MG_CUDA_EMULATOR_MEMORY_MB", 16384))) << 20;
  return bytes;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

cudaError_t fail(cudaError_t e) {
  t_last = e;
  return e;
}

StreamObject* legacy_stream(int device) {
  static std::vector<StreamObject> streams(std::size_t(std::max(1, device_count())));
  StreamObject* s = &streams[std::size_t(device)];
  s->device = device;
  s->legacy = true;
  return s;
}

StreamObject* stream_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream(t_device);
  return reinterpret_cast<StreamObject*>(s);
}

// Whether this thread may make a potentially unsafe call now (the runtime's capture rules).
bool prohibited() {
  for (StreamObject* s : g_captures) {
    if (forbids(s)) return true;
  }
  return false;
}

// Whether capture `s` forbids this thread's potentially unsafe calls.
bool forbids(const StreamObject* s) {
  if (t_mode == cudaStreamCaptureModeRelaxed || s->mode == cudaStreamCaptureModeRelaxed) return false;
  return s->thread == std::this_thread::get_id() ||
         (t_mode == cudaStreamCaptureModeGlobal && s->mode == cudaStreamCaptureModeGlobal);
}

// A prohibited call: fails and invalidates the captures that forbid it.
cudaError_t unsafe_call() {
  for (StreamObject* s : g_captures) {
    if (forbids(s)) s->invalidated = true;
  }
  return fail(cudaErrorStreamCaptureUnsupported);
}

void run_node(const Node& n) {
  switch (n.kind) {
    case Node::Kernel: {
      const std::string why = run_grid(n.shape, n.body, n.arg);
      if (!why.empty() && g_sticky == cudaSuccess) {
        g_sticky = cudaErrorLaunchFailure;
        g_sticky_reason = why;
        std::fprintf(stderr, "CUDA emulator: a kernel failed: %s\n", why.c_str());
      }
      break;
    }
    case Node::Copy:
      if (n.bytes > 0) std::memmove(n.dst, n.src, n.bytes);
      break;
    case Node::Fill:
      std::memset(n.dst, n.value, n.bytes);
      break;
    case Node::Task:
      (*n.task)();
      break;
  }
}

// Whether [p, p + bytes) lies inside one device allocation.
bool is_device_range(const void* p, std::size_t bytes) {
  auto it = g_allocations.upper_bound(uintptr_t(p));
  if (it == g_allocations.begin()) return false;
  --it;
  return !it->second.host && uintptr_t(p) + std::max<std::size_t>(bytes, 1) <= it->first + it->second.bytes;
}

}  // namespace mg_emu::rt

namespace mg_emu {

using namespace rt;

void submit_launch(const LaunchShape& shape, cudaStream_t stream, void (*body)(void*), void* arg,
                   void (*copy)(const void*, void**), void (*destroy)(void*)) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_sticky != cudaSuccess) return;
  const std::string bad = invalid_launch_reason(shape);
  if (!bad.empty()) {
    std::fprintf(stderr, "CUDA emulator: invalid launch configuration: %s\n", bad.c_str());
    t_last = cudaErrorInvalidConfiguration;
    return;
  }
  Node n;
  n.kind = Node::Kernel;
  n.shape = shape;
  n.body = body;
  StreamObject* s = stream_of(stream);
  if (s->device != t_device) {
    // The runtime refuses a launch into a stream of another device than the current one.
    std::fprintf(stderr, "CUDA emulator: a kernel launched on a stream of device %d while device %d is current\n",
                 s->device, t_device);
    t_last = cudaErrorInvalidResourceHandle;
    return;
  }
  if (s->capture || deferred_streams()) {
    copy(arg, &n.arg);
    n.destroy = destroy;
    (void)submit(stream, n);
    return;
  }
  n.arg = arg;
  run_node(n);
}

void submit_task(void* stream, std::function<void()> task) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_sticky != cudaSuccess) return;
  Node n;
  n.kind = Node::Task;
  n.task = std::make_shared<std::function<void()>>(std::move(task));
  (void)submit(static_cast<cudaStream_t>(stream), n);
}

bool is_device_memory(const void* p, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return is_device_range(p, bytes);
}

void set_deferred_streams(bool deferred) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  run_all();
  stream_mode() = deferred ? 1 : 0;
}

bool deferred_streams_on() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return stream_mode() == 1;
}

void run_stream_now(void* stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  StreamObject* s = stream_of(static_cast<cudaStream_t>(stream));
  if (!s->capture) run_until(s, s->enqueued);
}

std::string sticky_failure() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_sticky_reason;
}

}  // namespace mg_emu

using namespace mg_emu;
using namespace mg_emu::rt;

#define MG_EMU_ENTER()                                 \
  std::lock_guard<std::recursive_mutex> lock(g_mutex); \
  if (g_sticky != cudaSuccess) return fail(g_sticky)

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof(p->name), "mixgrad CUDA emulator (CPU)");
  p->totalGlobalMem = device_memory();
  p->sharedMemPerBlock = 48 * 1024;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kEmulatedSms;
  p->pciBusID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = kEmulatedSms; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: return fail(cudaErrorNotSupported);
  }
}

cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_sticky != cudaSuccess) return g_sticky;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_sticky != cudaSuccess ? g_sticky : t_last;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  MG_EMU_ENTER();
  *p = nullptr;
  if (prohibited()) return unsafe_call();
  if (g_device_bytes.size() < std::size_t(device_count())) g_device_bytes.resize(std::size_t(device_count()));
  std::size_t& used = g_device_bytes[std::size_t(t_device)];
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  if (rounded > device_memory() - used) return fail(cudaErrorMemoryAllocation);
  Allocation a{std::max<std::size_t>(bytes, 1), false, t_device, rounded};
  // The end rounded to 16 bytes (the widest vector a kernel loads), not to the 256 a GPU aligns
  // starts to, lies against the guard page: a read one element past most tensors faults (a
  // start is then 16-aligned only; kernels must not assume more, and ours choose their vector
  // width from the pointers).
  char* q = map_guarded((a.bytes + 15) / 16 * 16, a);
  if (q == nullptr) return fail(cudaErrorMemoryAllocation);
  used += rounded;
  g_allocations[uintptr_t(q)] = a;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  MG_EMU_ENTER();
  if (p == nullptr) return cudaSuccess;
  if (prohibited()) return unsafe_call();
  run_all();  // cudaFree waits for the device
  if (g_sticky != cudaSuccess) return fail(g_sticky);
  auto it = g_allocations.find(uintptr_t(p));
  if (it == g_allocations.end() || it->second.host) return fail(cudaErrorInvalidValue);
  const Allocation a = it->second;
  const std::string outside = overwritten_guard_bytes(it->first, a);
  if (!outside.empty()) {
    // A device fault, as a kernel failure: sticky, the reason printed once.
    g_sticky = cudaErrorLaunchFailure;
    g_sticky_reason = outside;
    std::fprintf(stderr, "CUDA emulator: a kernel failed: %s\n", outside.c_str());
    return fail(g_sticky);
  }
  g_device_bytes[std::size_t(a.device)] -= a.rounded;
  g_allocations.erase(it);
  unmap_freed(a);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  MG_EMU_ENTER();
  *p = nullptr;
  if (prohibited()) return unsafe_call();
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  void* q = std::aligned_alloc(256, rounded);
  if (q == nullptr) return fail(cudaErrorMemoryAllocation);
  g_allocations[uintptr_t(q)] = Allocation{rounded, true, t_device, rounded};
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  MG_EMU_ENTER();
  if (p == nullptr) return cudaSuccess;
  if (prohibited()) return unsafe_call();
  run_all();  // cudaFreeHost waits for the device
  if (g_sticky != cudaSuccess) return fail(g_sticky);
  auto it = g_allocations.find(uintptr_t(p));
  if (it == g_allocations.end() || !it->second.host) return fail(cudaErrorInvalidValue);
  g_allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  MG_EMU_ENTER();
  auto it = g_allocations.find(uintptr_t(host));
  if (it == g_allocations.end() || !it->second.host) return fail(cudaErrorInvalidValue);
  *device = host;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  MG_EMU_ENTER();
  *a = cudaPointerAttributes{};
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  auto it = g_allocations.upper_bound(uintptr_t(p));
  if (it != g_allocations.begin()) {
    --it;
    if (uintptr_t(p) < it->first + it->second.bytes) {
      a->type = it->second.host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
      a->device = it->second.device;
      a->devicePointer = const_cast<void*>(p);
      a->hostPointer = it->second.host ? const_cast<void*>(p) : nullptr;
    }
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  MG_EMU_ENTER();
  // The device side of a copy must lie inside one allocation (past its end a GPU faults).
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) && bytes > 0 && !is_device_range(dst, bytes)) {
    return fail(cudaErrorInvalidValue);
  }
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) && bytes > 0 && !is_device_range(src, bytes)) {
    return fail(cudaErrorInvalidValue);
  }
  Node n;
  n.kind = Node::Copy;
  n.dst = dst;
  n.src = src;
  n.bytes = bytes;
  // The runtime reads pageable host memory before the call returns and writes it before the call
  // returns; pinned host memory is read and written when the copy runs on the stream.
  const bool host_src = bytes > 0 && !is_device_range(src, bytes), host_dst = bytes > 0 && !is_device_range(dst, bytes);
  return submit(stream, n, /*staged=*/host_src && !is_pinned_range(src, bytes),
                /*blocking=*/host_dst && !is_pinned_range(dst, bytes));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  MG_EMU_ENTER();
  if (bytes > 0 && !is_device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
  Node n;
  n.kind = Node::Fill;
  n.dst = dst;
  n.value = value;
  n.bytes = bytes;
  return submit(stream, n);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  MG_EMU_ENTER();
  auto* obj = new StreamObject();
  obj->device = t_device;
  obj->blocking = (flags & cudaStreamNonBlocking) == 0;
  g_streams.push_back(obj);
  *s = reinterpret_cast<cudaStream_t>(obj);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  MG_EMU_ENTER();
  StreamObject* s = stream_of(stream);
  if (s->capture) {
    s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (prohibited()) return unsafe_call();
  run_until(s, s->enqueued);
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  MG_EMU_ENTER();
  if (!g_captures.empty() && prohibited()) return unsafe_call();
  run_all();
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  MG_EMU_ENTER();
  auto* e = reinterpret_cast<EventObject*>(event);
  StreamObject* s = stream_of(stream);
  if (e->captured && e->captured->capturing && !s->capture) {
    // A stream waiting on an event of a capture in progress joins that capture (fork).
    if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported);
    e->captured->members.push_back(s);
    s->capture = e->captured;
    s->origin = e->capture_stream;
    s->mode = e->capture_stream->mode;
    s->thread = e->capture_stream->thread;
  } else if (!s->capture && e->stream != nullptr && e->stream != s && e->stream->executed < e->position) {
    // Deferred streams: s's later work runs after e's stream has run up to the record.
    Work w;
    w.kind = Work::Wait;
    w.after = e->stream;
    w.position = e->position;
    enqueue(s, std::move(w));
  }
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  MG_EMU_ENTER();
  const StreamObject* s = stream_of(stream);
  *status = !s->capture     ? cudaStreamCaptureStatusNone
            : s->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  MG_EMU_ENTER();
  StreamObject* s = stream_of(stream);
  if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported);
  if (s->capture) return fail(cudaErrorIllegalState);
  s->capture = std::make_shared<GraphObject>();
  s->capture->members.push_back(s);
  s->invalidated = false;
  s->mode = mode;
  s->thread = std::this_thread::get_id();
  s->origin = nullptr;
  g_captures.push_back(s);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *graph = nullptr;
  StreamObject* s = stream_of(stream);
  if (!s->capture || s->origin != nullptr) return fail(cudaErrorIllegalState);
  if (s->mode != cudaStreamCaptureModeRelaxed && s->thread != std::this_thread::get_id()) {
    return fail(cudaErrorStreamCaptureWrongThread);
  }
  std::shared_ptr<GraphObject> g = s->capture;
  const bool invalidated = s->invalidated;
  // Every stream forked into the capture leaves it with the origin (the runtime also requires
  // each fork to have been joined back, cudaErrorStreamCaptureUnjoined: not checked here).
  for (StreamObject* m : g->members) {
    m->capture.reset();
    m->origin = nullptr;
    m->invalidated = false;
  }
  g->capturing = false;
  std::erase(g_captures, s);
  if (invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (g_sticky != cudaSuccess) return fail(g_sticky);
  *graph = reinterpret_cast<cudaGraph_t>(new std::shared_ptr<GraphObject>(g));
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(*mode, t_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  MG_EMU_ENTER();
  auto* g = reinterpret_cast<std::shared_ptr<GraphObject>*>(graph);
  *exec = reinterpret_cast<cudaGraphExec_t>(new ExecObject{*g});
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  MG_EMU_ENTER();
  auto* g = reinterpret_cast<std::shared_ptr<GraphObject>*>(graph);
  if (nodes != nullptr) return fail(cudaErrorNotSupported);
  *count = (*g)->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  MG_EMU_ENTER();
  StreamObject* s = stream_of(stream);
  if (s->capture) return fail(cudaErrorNotSupported);  // a graph inside a capture: not emulated
  if (deferred_streams()) {
    Work w;
    w.graph = reinterpret_cast<ExecObject*>(exec)->graph;
    enqueue(s, std::move(w));
    return cudaSuccess;
  }
  for (const Node& n : reinterpret_cast<ExecObject*>(exec)->graph->nodes) run_node(n);
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete reinterpret_cast<std::shared_ptr<GraphObject>*>(graph);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  delete reinterpret_cast<ExecObject*>(exec);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  MG_EMU_ENTER();
  auto* e = new EventObject();
  e->device = t_device;
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  MG_EMU_ENTER();
  auto* e = reinterpret_cast<EventObject*>(event);
  StreamObject* s = stream_of(stream);
  if (s->device != e->device) return fail(cudaErrorInvalidResourceHandle);  // the runtime's rule
  if (s->capture) {
    e->captured = s->capture;
    e->capture_stream = s->origin != nullptr ? s->origin : s;
    return cudaSuccess;
  }
  e->captured.reset();
  e->capture_stream = nullptr;
  if (deferred_streams()) {
    Work w;
    w.kind = Work::Record;
    w.event = e;
    ++e->pending;
    enqueue(s, std::move(w));
    e->stream = s;
    e->position = s->enqueued;
    e->serial = ++g_record_serial;
    return cudaSuccess;
  }
  e->recorded = true;
  e->ms = now_ms();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  MG_EMU_ENTER();
  auto* e = reinterpret_cast<EventObject*>(event);
  if (e->captured && e->captured->capturing) return fail(cudaErrorCapturedEvent);
  if (prohibited()) return unsafe_call();
  if (e->stream != nullptr && e->stream->executed < e->position) {
    // Deferred streams: not yet the first time this record is asked about; the GPU gets there
    // afterwards, so a loop that polls ends.
    if (e->told_not_ready != e->serial) {
      e->told_not_ready = e->serial;
      return fail(cudaErrorNotReady);
    }
    run_until(e->stream, e->position);
  }
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  MG_EMU_ENTER();
  auto* e = reinterpret_cast<EventObject*>(event);
  if (e->captured && e->captured->capturing) return fail(cudaErrorCapturedEvent);
  if (prohibited()) return unsafe_call();
  if (e->stream != nullptr) run_until(e->stream, e->position);
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  MG_EMU_ENTER();
  auto* a = reinterpret_cast<EventObject*>(start);
  auto* b = reinterpret_cast<EventObject*>(end);
  if (!a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle);
  for (const EventObject* e : {a, b}) {
    if (e->stream != nullptr && e->stream->executed < e->position) return fail(cudaErrorNotReady);
  }
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(b->ms - a->ms);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto* e = reinterpret_cast<EventObject*>(event);
  if (e->pending > 0) {
    e->destroyed = true;  // its queued record deletes it (the runtime frees it on completion)
  } else {
    delete e;
  }
  return cudaSuccess;
}

}  // extern "C"
