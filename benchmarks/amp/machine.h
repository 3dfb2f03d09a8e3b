// What a bench_amp result must say about where it was measured: the processor model, the
// vector/matrix extensions it has (AMX, AVX512-BF16, AVX512-FP16), the instruction set oneDNN
// actually dispatches to and whether bf16 GEMMs/convs run oneDNN's bf16 kernels (AMX) or f32 ones
// on widened operands, the threads and the
// environment variables that change the numbers, the load average at the start, the date and
// the commit. Printed above the table and written into the JSON lines and the Markdown record.
//
// Decision: the processor's features come from /proc/cpuinfo (what the kernel enabled, so AMX
// shows only where the kernel supports its state) and "the ISA used" from oneDNN's own
// dnnl_get_effective_cpu_isa (which honours ONEDNN_MAX_CPU_ISA), not from a guess.
//
//   mg::bench::Machine m = mg::bench::describe_machine(2);
//   std::printf("%s\n", m.summary().c_str());
#pragma once
#include <string>
#include <vector>

namespace mg::bench {

struct Machine {
  std::string processor;         // "Intel(R) Xeon(R) Platinum 8480+" (/proc/cpuinfo model name)
  int logical_cpus = 0;          // processors the process may run on
  bool avx512f = false, avx512_bf16 = false, avx512_fp16 = false, amx_bf16 = false;
  std::string onednn_isa;        // "avx512_core_amx": oneDNN's effective ISA
  // How CPU bf16 GEMMs and convolutions run here (mg::cpu::gemm_paths()): "native" (oneDNN's bf16
  // kernels, AMX processors) or "via f32" (widened exactly to f32, f32 kernels, one rounding). The
  // summary and the Markdown say it on CPU runs only (gpu empty); the JSON always.
  std::string bf16_kernels;
  int threads = 0;               // the benchmark's worker threads
  std::vector<std::string> env;  // "OMP_WAIT_POLICY=PASSIVE", ... (only those set)
  std::string load_average;      // "1.93 1.71 1.60" at the start
  std::string date_utc;          // "2026-12-01 23:50 UTC"
  std::string commit;            // "ae9bbab" (+ " (modified)" for a dirty tree); "unknown" outside git
  std::string gpu;               // device name on CUDA runs, else ""
  std::string gpu_driver;        // "CUDA driver 13.0, runtime 13.0" on CUDA runs, else ""

  // "Intel ... | AMX-BF16, AVX512-BF16, AVX512-FP16 | oneDNN ISA avx512_core_amx | bf16 kernels native | 1 thread"
  std::string summary() const;
  // "AMX-BF16, AVX512-BF16, AVX512-FP16" (the features present, "none" without any).
  std::string features() const;
};

// `build_commit` is the commit the program was built from (MG_BUILD_COMMIT); `source_dir` the
// repository, read at run time (git -C): when the tree has moved on since the build, the commit
// says so ("abc1234; the source tree is now at def5678"). Never throws: fields it cannot read say
// "unknown".
Machine describe_machine(int threads, const std::string& source_dir, const std::string& build_commit = "");

}  // namespace mg::bench
