// Deferred streams of the CUDA emulator (runtime_state.h; docs/cuda_emulator.md), on with
// MG_CUDA_EMULATOR_STREAMS=deferred: each stream's work is queued and run as late as the program
// allows — at a synchronisation (stream, event, device, a blocking copy, cudaFree), when another
// stream waits on one of its events, or at the second query of an unfinished event — so a stream
// that reads what another writes without waiting on its event, or a host that reads a pinned
// buffer before synchronising, sees the old bytes, as on a GPU that is slow to get there.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mixgrad/cuda/emulator/runtime_state.h"

namespace mg_emu::rt {
namespace {

// Drops every queued item (after a device fault nothing more runs), releasing what they own.
void drop_queues() {
  std::vector<StreamObject*> all = g_streams;
  for (int d = 0; d < std::max(1, device_count()); ++d) all.push_back(legacy_stream(d));
  for (StreamObject* s : all) {
    for (Work& w : s->queue) {
      if (w.node.destroy != nullptr) w.node.destroy(w.node.arg);
      if (w.kind == Work::Record && --w.event->pending == 0 && w.event->destroyed) delete w.event;
    }
    s->executed += s->queue.size();
    s->queue.clear();
  }
}

void execute(Work& w) {
  switch (w.kind) {
    case Work::Run:
      if (w.graph) {
        for (const Node& n : w.graph->nodes) run_node(n);
      } else {
        if (!w.staged.empty()) w.node.src = w.staged.data();
        run_node(w.node);
      }
      break;
    case Work::Record:
      w.event->recorded = true;
      w.event->ms = now_ms();
      if (--w.event->pending == 0 && w.event->destroyed) delete w.event;
      break;
    case Work::Wait:
      run_until(w.after, w.position);
      break;
  }
}

}  // namespace

// MG_CUDA_EMULATOR_STREAMS: "immediate" (or unset) or "deferred"; another text makes the first
// call that asks a sticky failure naming it.
int& stream_mode() {
  static int mode = [] {
    const char* v = std::getenv("MG_CUDA_EMULATOR_STREAMS");
    const std::string t = v == nullptr ? "" : v;
    if (t.empty() || t == "immediate") return 0;
    if (t == "deferred") return 1;
    return -1;
  }();
  return mode;
}

bool deferred_streams() {
  const int mode = stream_mode();
  if (mode < 0 && g_sticky == cudaSuccess) {
    g_sticky = cudaErrorInvalidValue;
    g_sticky_reason = std::string("MG_CUDA_EMULATOR_STREAMS=") + std::getenv("MG_CUDA_EMULATOR_STREAMS") +
                      ": expected immediate or deferred";
    std::fprintf(stderr, "CUDA emulator: %s\n", g_sticky_reason.c_str());
  }
  return mode == 1;
}

// Runs `s`'s queue until it has run `position` items (and whatever those wait for).
void run_until(StreamObject* s, uint64_t position) {
  if (s->executed >= position || s->queue.empty()) return;
  if (s->running) {
    // s waits (through other streams) for its own later work. An event names work queued before
    // its record, so the runtime's calls cannot build this; kept as a guard against a wrong queue.
    if (g_sticky == cudaSuccess) {
      g_sticky = cudaErrorLaunchFailure;
      g_sticky_reason = "streams wait on each other's events in a cycle (a GPU hangs here)";
      std::fprintf(stderr, "CUDA emulator: %s\n", g_sticky_reason.c_str());
    }
    return;
  }
  s->running = true;
  while (s->executed < position && !s->queue.empty() && g_sticky == cudaSuccess) {
    Work w = std::move(s->queue.front());
    s->queue.pop_front();
    execute(w);
    if (w.node.destroy != nullptr) w.node.destroy(w.node.arg);
    ++s->executed;
  }
  s->running = false;
  if (g_sticky != cudaSuccess) drop_queues();
}

void run_all() {
  for (int d = 0; d < std::max(1, device_count()); ++d) run_until(legacy_stream(d), legacy_stream(d)->enqueued);
  for (StreamObject* s : g_streams) run_until(s, s->enqueued);
}

// Queues `w` on `s`, after the work it must follow by the legacy stream's rule: the legacy stream
// waits for the blocking streams of its device, and they wait for it.
void enqueue(StreamObject* s, Work w) {
  auto wait_for = [&](StreamObject* other) {
    if (other == s || other->executed >= other->enqueued) return;
    Work before;
    before.kind = Work::Wait;
    before.after = other;
    before.position = other->enqueued;
    s->queue.push_back(std::move(before));
    ++s->enqueued;
  };
  if (s->legacy) {
    for (StreamObject* b : g_streams) {
      if (b->blocking && b->device == s->device) wait_for(b);
    }
  } else if (s->blocking) {
    wait_for(legacy_stream(s->device));
  }
  s->queue.push_back(std::move(w));
  ++s->enqueued;
}

// Whether [p, p + bytes) lies inside one pinned host allocation (cudaHostAlloc).
bool is_pinned_range(const void* p, std::size_t bytes) {
  auto it = g_allocations.upper_bound(uintptr_t(p));
  if (it == g_allocations.begin()) return false;
  --it;
  return it->second.host && uintptr_t(p) + std::max<std::size_t>(bytes, 1) <= it->first + it->second.bytes;
}

cudaError_t submit(cudaStream_t stream, Node n, bool staged, bool blocking) {
  StreamObject* s = stream_of(stream);
  if (s->capture) {
    s->capture->nodes.push_back(n);
    return cudaSuccess;
  }
  if (!deferred_streams()) {
    run_node(n);
    if (n.destroy != nullptr) n.destroy(n.arg);
    return cudaSuccess;
  }
  Work w;
  w.node = n;
  if (staged) w.staged.assign(static_cast<const char*>(n.src), static_cast<const char*>(n.src) + n.bytes);
  enqueue(s, std::move(w));
  if (blocking) run_until(s, s->enqueued);
  return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}

}  // namespace mg_emu::rt
