// What the rest of the emulated build may ask the CUDA emulator (MG_WITH_CUDA=EMULATE,
// docs/cuda_emulator.md). Internal to cuda/ and its tests.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace mg_emu {

// Streaming multiprocessors of an emulated device: few, so that a grid-stride launch is a few
// dozen blocks and the emulated tests stay quick, yet every kernel still runs several blocks.
inline constexpr int kEmulatedSms = 4;

// Why the first failed kernel failed ("" when none has): the reason behind a sticky
// cudaErrorLaunchFailure.
std::string sticky_failure();

// Runs `task` on `stream` (a cudaStream_t): now, or at each replay when the stream is being
// captured. The emulated libraries (cuBLASLt, cuDNN) submit their work this way; the task must
// capture its operands by value.
void submit_task(void* stream, std::function<void()> task);

// MG_CUDA_EMULATOR_STREAMS=deferred's switch for tests: queued work runs first, then later work
// is queued (true) or runs when submitted (false).
void set_deferred_streams(bool deferred);
bool deferred_streams_on();

// Runs the work queued on `stream` (a cudaStream_t) now, for calls that block the host until
// their work is done (cuDNN's Find*Ex). Nothing to do unless MG_CUDA_EMULATOR_STREAMS=deferred.
void run_stream_now(void* stream);

// Whether [p, p + bytes) lies inside one emulated device allocation.
bool is_device_memory(const void* p, std::size_t bytes);

}  // namespace mg_emu
