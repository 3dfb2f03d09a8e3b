// The CUDA API of cuda/cuda.h in a build without the CUDA backend: nothing is available, the
// queries answer so, and whatever needs a device throws DeviceError saying how to get one.
#include "mixgrad/core/error.h"
#include "mixgrad/cuda/blas.h"
#include "mixgrad/cuda/conv_settings.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/graph.h"

namespace mg::cuda {
namespace {

constexpr const char* kReason =
    "mixgrad was built without the CUDA backend (configure on a machine with the CUDA Toolkit, "
    "cuDNN and nvcc; cmake says what it found: 'mixgrad: CUDA backend: ...')";

[[noreturn]] void unavailable(const std::string& what) {
  MG_THROW(DeviceError, what, " is not available: ", kReason,
           "\n  hint: use the CPU (Device::cpu()), or rebuild with -DMG_WITH_CUDA=ON");
}

bool g_allow_tf32 = false;
bool g_cudnn_benchmark = false;
bool g_cudnn_deterministic = false;

}  // namespace

bool built_with_cuda() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kReason; }
void check_device(Device device) { unavailable(device.str()); }
DeviceProperties device_properties(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
int current_device() { return 0; }
void set_device(int index) { unavailable(Device::cuda(index).str()); }
DeviceGuard::DeviceGuard(int index) : previous_(0) { set_device(index); }
DeviceGuard::~DeviceGuard() = default;
Stream Stream::create(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
Stream Stream::default_stream(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
void Stream::synchronize() const { unavailable(Device::cuda(device_).str()); }
Stream current_stream(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
StreamGuard::StreamGuard(const Stream& stream) : previous_device_(0) { unavailable(Device::cuda(stream.device()).str()); }
StreamGuard::~StreamGuard() = default;
Event::Event(bool) { unavailable("cuda:0"); }
Event::~Event() = default;
void Event::record(const Stream&) { unavailable("cuda:0"); }
void Event::block(const Stream&) const { unavailable("cuda:0"); }
bool Event::query() const { unavailable("cuda:0"); }
void Event::synchronize() const { unavailable("cuda:0"); }
float Event::elapsed_ms(const Event&) const { unavailable("cuda:0"); }
void synchronize(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
uint64_t sync_count() { return 0; }
std::string take_pending_error() { return ""; }
DeviceMemoryStats memory_stats(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
void reset_peak_memory(int device) { unavailable(Device::cuda(device < 0 ? 0 : device).str()); }
void record_stream(const Tensor&, const Stream& stream) { unavailable(Device::cuda(stream.device()).str()); }
void empty_cache() {}  // nothing is cached without a device
bool caching_allocator_enabled() { return true; }  // no device allocator to turn off
PinnedMemoryStats pinned_memory_stats() { return {}; }  // nothing can be pinned
void reset_peak_pinned_memory() {}
void empty_pinned_cache() {}
std::string blas_library() { return "none (built without CUDA)"; }
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
std::size_t gemm_heuristic_cache_size() { return 0; }  // cuda/blas.h: no GEMM was planned
// The cuDNN switches are plain flags here (nothing can run a conv on a device).
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark = on; }
bool cudnn_benchmark() { return g_cudnn_benchmark; }
void set_cudnn_deterministic(bool on) { g_cudnn_deterministic = on; }
bool cudnn_deterministic() { return g_cudnn_deterministic; }
std::size_t cudnn_algo_cache_size() { return 0; }
void clear_cudnn_algo_cache() {}
int cudnn_version() { return 0; }

// CUDA graphs: nothing can be captured without a device.
struct Graph::Impl {};
Graph::Graph() : impl_(nullptr) {}
Graph::~Graph() = default;
void Graph::add_generator(Generator&) {}
void Graph::add_participant(GraphParticipant&) {}
void Graph::capture_begin(const Stream& stream) { unavailable(Device::cuda(stream.device()).str()); }
void Graph::capture_end() { unavailable("cuda::Graph"); }
void Graph::capture_abandon() noexcept {}
void Graph::replay() { unavailable("cuda::Graph"); }
void Graph::reset() {}
bool Graph::capturing() const { return false; }
bool Graph::ready() const { return false; }
int64_t Graph::replays() const { return 0; }
std::size_t Graph::num_nodes() const { return 0; }
int Graph::device() const { return 0; }
GraphCapture::GraphCapture(Graph& graph) : graph_(graph), uncaught_(0) { unavailable("cuda::GraphCapture"); }
GraphCapture::GraphCapture(Graph& graph, const Stream&) : graph_(graph), uncaught_(0) { unavailable("cuda::GraphCapture"); }
GraphCapture::~GraphCapture() noexcept(false) {}
void GraphCapture::end() {}
bool is_capturing() { return false; }

}  // namespace mg::cuda
