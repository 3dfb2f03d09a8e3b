// The machine description of a benchmark run (see machine.h).
#include "benchmarks/amp/machine.h"

#include <oneapi/dnnl/dnnl.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "mixgrad/ops/cpu/gemm.h"

namespace mg::bench {

namespace {

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa 0x" + [&] { std::ostringstream s; s << std::hex << int(isa); return s.str(); }();
  }
}

// The first line of a command's output, or "".
std::string command_line_output(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, p)) out = buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

bool has_flag(const std::string& flags, const std::string& f) {
  return (" " + flags + " ").find(" " + f + " ") != std::string::npos;
}

}  // namespace

std::string Machine::features() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add(amx_bf16, "AMX-BF16");
  add(avx512_bf16, "AVX512-BF16");
  add(avx512_fp16, "AVX512-FP16");
  add(avx512f && !avx512_bf16 && !avx512_fp16, "AVX-512");
  return s.empty() ? "none of AMX/AVX-512" : s;
}

std::string Machine::summary() const {
  std::ostringstream s;
  s << processor << " (" << logical_cpus << " logical CPUs) | " << features() << " | oneDNN ISA " << onednn_isa
    << (gpu.empty() ? " | bf16 kernels " + bf16_kernels : "") << " | " << threads
    << (threads == 1 ? " thread" : " threads");
  if (!gpu.empty()) s << " | GPU " << gpu;
  return s.str();
}

Machine describe_machine(int threads, const std::string& source_dir, const std::string& build_commit) {
  Machine m;
  m.threads = threads;
  m.processor = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model" && line.rfind("model name", 0) == 0 && m.processor == "unknown") m.processor = value;
    if (key == "flags" && flags.empty()) flags = value;
  }
  m.avx512f = has_flag(flags, "avx512f");
  m.avx512_bf16 = has_flag(flags, "avx512_bf16");
  m.avx512_fp16 = has_flag(flags, "avx512_fp16");
  m.amx_bf16 = has_flag(flags, "amx_bf16");
  cpu_set_t set;
  CPU_ZERO(&set);
  m.logical_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  m.onednn_isa = onednn_isa_name(dnnl_get_effective_cpu_isa());
  m.bf16_kernels = mg::cpu::gemm_paths().bf16_native ? "native" : "via f32";
  for (const char* name : {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                           "MG_CONVERT_ISA", "CUDA_VISIBLE_DEVICES"}) {
    if (const char* v = std::getenv(name)) m.env.push_back(std::string(name) + "=" + v);
  }
  std::ifstream load("/proc/loadavg");
  std::string a, b, c;
  if (load >> a >> b >> c) m.load_average = a + " " + b + " " + c;
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  m.date_utc = date;
  const std::string git = "git -C '" + source_dir + "' ";
  std::string tree = command_line_output(git + "rev-parse --short HEAD 2>/dev/null");
  if (tree.empty()) {
    tree = "unknown";
  } else if (!command_line_output(git + "status --porcelain --untracked-files=no 2>/dev/null").empty()) {
    tree += " (modified)";
  }
  if (build_commit.empty() || build_commit == "unknown") {
    m.commit = tree;  // no record of the build's: the tree's, as before
  } else {
    m.commit = build_commit;
    if (tree != build_commit) m.commit += "; the source tree is now at " + tree;
  }
  return m;
}

}  // namespace mg::bench
