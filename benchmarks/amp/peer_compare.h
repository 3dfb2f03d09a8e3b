// bench_amp beside PyTorch (issue 15): reads bench_amp's JSON lines and those of its PyTorch
// peer (benchmarks/torch_amp_peer.py, one object per configuration and process), pairs each of
// our configurations with PyTorch's, and reports the step-time ratio per pair, each level's
// speed-up over our own O0 f32, peak memory, host synchronisations per step and the layout that
// ran — with the targets checked per row: ours ≤ 1.0x PyTorch's step time, O1/O2 ≥ 2x our
// O0 f32, zero synchronisations per step at O1/O2.
//
// Decision: this is C++ and not the Python driver's, so the pairing and the targets are tested
// on the CPU without Python; the driver only runs the processes alternately and collects their
// lines. When a configuration was measured in several rounds, each side's best (lowest median)
// round counts, as the machine's noise only ever makes a step slower.
//
//   auto rows = mg::bench::compare_with_peer(mg::bench::read_measurements("ours.jsonl"),
//                                            mg::bench::read_measurements("torch.jsonl"));
//   std::printf("%s", mg::bench::format_comparison(rows).c_str());
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mg::bench {

// One configuration measured by one framework.
struct Measurement {
  std::string framework;     // "mixgrad" or "pytorch"
  std::string model;         // "resnet50"
  std::string config;        // ours: "O1 f16", "O0 tf32"; PyTorch: its mode, "autocast-f16"
  int64_t batch = 0;
  std::string unit;          // "img", "seq"
  double wall_median_s = 0, wall_min_s = 0, wall_max_s = 0;
  int64_t peak_bytes = -1;   // the device allocator's peak (CUDA) or the peak RSS (CPU); -1: unknown
  double syncs_per_step = -1;  // host synchronisations per timed step; -1: not counted
  double loss_final = 0;
  std::string layout;        // ours: the conv layout that ran ("NHWC", "NCHW", "-"); PyTorch: asked
  std::string device;        // "NVIDIA H200 (CUDA driver 13.0, runtime 13.0)", or the processor
  std::string version;       // ours: the commit; PyTorch: "torch 2.11.0"
  std::string date, command;
};

// One JSON object of either program: bench_amp's (it has "level") or the peer's (it has "mode").
// A missing or mistyped field is an mg::Error naming it.
Measurement parse_measurement(const std::string& json_line);
// Every non-empty line of a JSON-lines file; an unreadable file is an mg::Error.
std::vector<Measurement> read_measurements(const std::string& path);

// The PyTorch mode paired with one of our configurations: O0 f32 -> fp32, O0 tf32 -> tf32,
// O1/O2 <d> -> autocast-<d> (torch.autocast, + GradScaler for f16: PyTorch has no O2), O3 <d> ->
// <d> (the model cast to <d> with the same optimizer: Apex's O3, pure low precision). An unknown
// configuration is an mg::Error.
std::string peer_mode(const std::string& config);

struct Targets {
  double max_ratio = 1.0;    // ours / PyTorch step time, every level
  double min_speedup = 2.0;  // O1 and O2 over our O0 f32
  double max_syncs = 0;      // host synchronisations per step at O1 and O2
};

struct Comparison {
  Measurement ours;                 // our best round
  std::optional<Measurement> peer;  // PyTorch's best round of peer_mode(ours.config); none: not measured
  int ours_rounds = 0, peer_rounds = 0;
  double ratio = -1;          // ours / PyTorch median step time (< 1: mixgrad is faster); -1: no peer
  double speedup_vs_o0 = -1;  // our O0 f32 median / this one's; -1: no O0 f32 of the model
  std::vector<std::string> missed;  // each target the row misses, in words
};

// One row per (model, configuration) of ours, in the order first seen.
std::vector<Comparison> compare_with_peer(const std::vector<Measurement>& ours, const std::vector<Measurement>& peer,
                                          const Targets& targets = {});

std::vector<std::string> comparison_header();
std::vector<std::vector<std::string>> comparison_rows(const std::vector<Comparison>& rows);
// The aligned table and one line per missed target (or "every target met").
std::string format_comparison(const std::vector<Comparison>& rows);
// One JSON object per row: both measurements, the ratio, the speed-up and the missed targets.
void write_comparison_json(const std::string& path, const std::vector<Comparison>& rows);
// Appends "## bench_amp beside PyTorch, <date>" with the device, commit, PyTorch version, every
// distinct command of both sides, the notes (one line each) and the table; throws mg::Error when
// the file cannot be written.
void append_comparison_markdown(const std::string& path, const std::vector<Comparison>& rows,
                                const std::vector<std::string>& notes);

}  // namespace mg::bench
