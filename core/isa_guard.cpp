// The processor check (core/isa_guard.h). This file is compiled for the baseline x86-64 whatever
// MG_NATIVE says (CMakeLists.txt), and the check calls only C functions and functions of this file:
// an inline C++ function from a header could be the copy another file compiled with -march=native,
// and would then stop on the very processor this check is for.
#include "mixgrad/core/isa_guard.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

// Referenced from core/tensor.cpp, so that every program using tensors links this file (and its
// constructor) from the static library.
extern "C" const char mg_isa_guard_anchor = 0;

namespace mg::isa {
namespace {

constexpr const char* kNames[] = {
#define MG_ISA(index, name) name,
#include "mixgrad/core/isa_extensions.def"
#undef MG_ISA
};
constexpr int kCount = int(sizeof(kNames) / sizeof(kNames[0]));

// The bits of the comma-separated names in MG_TEST_PROCESSOR_LACKS (unknown names are ignored).
uint64_t pretended_missing() {
  const char* v = std::getenv("MG_TEST_PROCESSOR_LACKS");
  uint64_t m = 0;
  while (v != nullptr && *v != '\0') {
    const char* end = std::strchr(v, ',');
    const std::size_t n = end != nullptr ? std::size_t(end - v) : std::strlen(v);
    for (int i = 0; i < kCount; ++i) {
      if (std::strlen(kNames[i]) == n && std::strncmp(kNames[i], v, n) == 0) m |= uint64_t(1) << i;
    }
    v = end != nullptr ? end + 1 : nullptr;
  }
  return m;
}

// Runs before the program's other constructors (priority 101, the first a program may use).
__attribute__((constructor(101))) void check_processor() {
  char message[1024];
  if (describe_missing(kCompiledExtensions, processor_extensions() & ~pretended_missing(), message, sizeof message)) {
    std::fputs(message, stderr);
    std::_Exit(1);
  }
}

}  // namespace

uint64_t processor_extensions() {
  uint64_t m = 0;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // needed before the supports checks when run from a constructor
#define MG_ISA(index, name) \
  if (__builtin_cpu_supports(name)) m |= uint64_t(1) << (index);
#include "mixgrad/core/isa_extensions.def"
#undef MG_ISA
#endif
  return m;
}

const char* extension_name(int i) { return i >= 0 && i < kCount ? kNames[i] : nullptr; }

bool describe_missing(uint64_t compiled, uint64_t processor, char* out, std::size_t size) {
  const uint64_t missing = compiled & ~processor;
  if (missing == 0 || size == 0) return missing != 0;
  char names[512] = "";
  std::size_t used = 0;
  for (int i = 0; i < kCount; ++i) {
    if ((missing >> i & 1) == 0) continue;
    const int n = std::snprintf(names + used, sizeof names - used, "%s%s", used > 0 ? ", " : "", kNames[i]);
    if (n < 0 || std::size_t(n) >= sizeof names - used) break;
    used += std::size_t(n);
  }
  std::snprintf(out, size,
                "mixgrad: this library was compiled with -march=native (MG_NATIVE=ON) on a processor with %s, which "
                "this processor lacks: its code would stop with an illegal instruction.\n"
                "  hint: rebuild mixgrad on this machine, or configure it with -DMG_NATIVE=OFF for a library that runs "
                "on any x86-64 processor\n",
                names);
  return true;
}

}  // namespace mg::isa
