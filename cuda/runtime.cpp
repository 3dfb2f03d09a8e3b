// The CUDA runtime layer: device discovery that degrades gracefully, the current device and
// stream per thread, streams, events, synchronisation and its counter, checked calls.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/kernels/launch.h"

namespace mg::cuda {

// Lets this file build Stream values from raw handles (the constructor is private so user code
// cannot make a Stream out of an arbitrary pointer).
struct StreamAccess {
  static Stream make(void* handle, int device) { return Stream(handle, device); }
};

namespace {

struct Discovery {
  int count = 0;
  std::string reason;  // empty when count > 0
};

// cudaGetDeviceCount once per process. Its failure is not sticky, so a machine without a driver
// or without a GPU runs CPU-only and only a request for a CUDA device reports the reason.
const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    const cudaError_t status = cudaGetDeviceCount(&r.count);
    if (status != cudaSuccess) {
      r.count = 0;
      switch (status) {
        case cudaErrorNoDevice: r.reason = "no CUDA device found"; break;
        case cudaErrorInsufficientDriver:
          r.reason = "the CUDA driver is missing or older than this build's CUDA runtime";
          break;
        default:
          r.reason = std::string("CUDA is unusable: cudaGetDeviceCount returned ") +
                     cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
      }
      (void)cudaGetLastError();  // leave no error behind for later calls
    } else if (r.count == 0) {
      r.reason = "no CUDA device found";
    }
    return r;
  }();
  return d;
}

std::string device_list(int count) {
  return count == 1 ? "1 CUDA device (cuda:0)"
                    : std::to_string(count) + " CUDA devices (cuda:0 to cuda:" + std::to_string(count - 1) + ")";
}

// The runtime's current device, asked each time (cudaGetDevice is cheap and makes no context
// switch): a cached copy would go stale when other code (NCCL, a user's own CUDA) calls
// cudaSetDevice. 0 when CUDA is unusable.
int runtime_device() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return d;
}
// The current stream per device of this thread; nullptr is the default stream.
thread_local std::vector<void*> t_current_streams;

void*& current_stream_slot(int device) {
  if (t_current_streams.size() < std::size_t(device_count())) t_current_streams.resize(device_count(), nullptr);
  return t_current_streams[std::size_t(device)];
}

int resolve(int device) {
  const int d = device < 0 ? runtime_device() : device;
  check_device(Device::cuda(d));
  return d;
}

// Streams made by Stream::create come from a pool of kPoolSize non-blocking streams per device,
// handed out round robin and never destroyed, as PyTorch does: a stream that outlives its users
// is cheap, and blocks the caching allocator keyed by a stream id can never see the id reused by
// a different stream.
constexpr int kPoolSize = 32;
struct StreamPool {
  std::mutex mutex;
  std::vector<std::vector<cudaStream_t>> streams;  // per device, created lazily
  std::vector<int> next;
};
StreamPool& stream_pool() {
  static StreamPool* pool = new StreamPool();  // never destroyed: streams live for the process
  return *pool;
}

std::atomic<uint64_t> g_sync_count{0};
std::atomic<bool> g_allow_tf32{false};

}  // namespace

namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  MG_THROW(CudaError, "CUDA error: ", call, " returned ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ") on ", known ? "cuda:" + std::to_string(device) : "an unknown device",
           " [", file, ":", line, "]");
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("MG_CUDA_SYNC");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) throw_cuda_error(launch, kernel, file, line);
  // Inside a capture nothing ran yet (and a wait would be refused): Graph::replay waits instead.
  if (sync_after_launch() && !is_capturing()) {
    check_host_wait(std::string("MG_CUDA_SYNC=1 (a device synchronisation after ") + kernel + ")", HostWait::Device,
                    runtime_device());
    count_sync();
    const cudaError_t run = cudaDeviceSynchronize();
    if (run != cudaSuccess) throw_cuda_error(run, kernel, file, line);
    raise_device_check(runtime_device(), "MG_CUDA_SYNC=1's wait after the launch");
  }
}

void count_sync() { g_sync_count.fetch_add(1, std::memory_order_relaxed); }

}  // namespace detail

bool built_with_cuda() { return true; }
bool is_available() { return discovery().count > 0; }
int device_count() { return discovery().count; }
std::string unavailable_reason() { return discovery().reason; }

void check_device(Device device) {
  MG_CHECK(device.is_cuda(), DeviceError, "cuda: expected a CUDA device, got ", device.str());
  const Discovery& d = discovery();
  MG_CHECK(d.count > 0, DeviceError, device.str(), " is not available: ", d.reason,
           "\n  hint: run on a machine with an NVIDIA GPU, or use the CPU (Device::cpu())");
  MG_CHECK(device.index >= 0 && device.index < d.count, DeviceError, device.str(),
           " is out of range: this machine has ", device_list(d.count));
}

DeviceProperties device_properties(int device) {
  const int d = resolve(device);
  cudaDeviceProp p{};
  MG_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
  DeviceProperties r;
  r.name = p.name;
  r.major = p.major;
  r.minor = p.minor;
  r.sm_count = p.multiProcessorCount;
  r.total_memory = p.totalGlobalMem;
  MG_CUDA_CHECK(cudaDriverGetVersion(&r.driver_version));
  MG_CUDA_CHECK(cudaRuntimeGetVersion(&r.runtime_version));
  return r;
}

int current_device() { return is_available() ? runtime_device() : 0; }

// Every launch makes its device current through a DeviceGuard; when it already is (the common
// case) only cudaGetDevice runs.
void set_device(int index) {
  check_device(Device::cuda(index));
  if (index != runtime_device()) MG_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) : previous_(current_device()) { set_device(index); }
DeviceGuard::~DeviceGuard() {
  if (previous_ != runtime_device()) (void)cudaSetDevice(previous_);
}

Stream Stream::create(int device) {
  const int d = resolve(device);
  StreamPool& pool = stream_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (pool.streams.size() < std::size_t(device_count())) {
    pool.streams.resize(device_count());
    pool.next.resize(device_count(), 0);
  }
  std::vector<cudaStream_t>& streams = pool.streams[std::size_t(d)];
  int& next = pool.next[std::size_t(d)];
  if (int(streams.size()) <= next) {
    DeviceGuard guard(d);
    cudaStream_t s = nullptr;
    MG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams.push_back(s);
  }
  cudaStream_t s = streams[std::size_t(next)];
  next = (next + 1) % kPoolSize;
  return Stream(s, d);
}

Stream Stream::default_stream(int device) { return Stream(nullptr, resolve(device)); }

void Stream::synchronize() const {
  DeviceGuard guard(device_);
  detail::check_host_wait("Stream::synchronize (cudaStreamSynchronize)", HostWait::Stream, device_);
  detail::count_sync();
  MG_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
  detail::raise_device_check(device_, "Stream::synchronize");
}

Stream current_stream(int device) {
  const int d = resolve(device);
  return StreamAccess::make(current_stream_slot(d), d);
}

StreamGuard::StreamGuard(const Stream& stream)
    : previous_stream_(current_stream(stream.device())), previous_device_(current_device()) {
  set_device(stream.device());
  current_stream_slot(stream.device()) = stream.handle();
}
StreamGuard::~StreamGuard() {
  current_stream_slot(previous_stream_.device()) = previous_stream_.handle();
  if (previous_device_ != runtime_device()) (void)cudaSetDevice(previous_device_);
}

Event::Event(bool timing) {
  device_ = current_device();
  check_device(Device::cuda(device_));
  DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  MG_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  handle_ = e;
}

Event::~Event() {
  if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void Event::record(const Stream& stream) {
  MG_CHECK(stream.device() == device_, DeviceError, "Event: created on cuda:", device_,
           " but recorded on a stream of cuda:", stream.device());
  DeviceGuard guard(device_);
  MG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())));
  recorded_ = true;
}

void Event::block(const Stream& stream) const {
  if (!recorded_) return;  // nothing to wait for, as cudaStreamWaitEvent on an unrecorded event
  DeviceGuard guard(stream.device());
  MG_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(handle_), 0));
}

bool Event::query() const {
  if (!recorded_) return true;
  DeviceGuard guard(device_);  // an error names the event's device (CudaError reads the current one)
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (status == cudaErrorNotReady) {
    // Not an error: clear it only if it is what is pending, never an earlier launch's failure.
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    return false;
  }
  MG_CUDA_CHECK_NAMED(status, "cudaEventQuery");
  return true;
}

void Event::synchronize() const {
  if (!recorded_) return;
  detail::check_host_wait("Event::synchronize (cudaEventSynchronize)", HostWait::Stream, device_);
  detail::count_sync();
  DeviceGuard guard(device_);
  MG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
  detail::raise_device_check(device_, "Event::synchronize");
}

float Event::elapsed_ms(const Event& end) const {
  MG_CHECK(recorded_ && end.recorded_, Error, "Event::elapsed_ms: both events must be recorded first");
  float ms = 0;
  DeviceGuard guard(device_);
  MG_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)));
  return ms;
}

std::string take_pending_error() {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? "" : cudaGetErrorName(status);
}

void synchronize(int device) {
  const int d = resolve(device);
  DeviceGuard guard(d);
  detail::check_host_wait("cuda::synchronize (cudaDeviceSynchronize)", HostWait::Device, d);
  detail::count_sync();
  MG_CUDA_CHECK(cudaDeviceSynchronize());
  detail::raise_device_check(d, "cuda::synchronize");
}

int sm_count(int device) {
  static std::mutex mutex;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (counts.empty()) counts.assign(std::size_t(device_count()), 0);
  int& c = counts.at(std::size_t(device));
  if (c == 0) MG_CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device));
  return c;
}

uint64_t sync_count() { return g_sync_count.load(std::memory_order_relaxed); }

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

}  // namespace mg::cuda
