// The processor check of a library built with MG_NATIVE=ON (-march=native, the default): its
// code may use every instruction set extension of the build machine, so on a processor without
// one of them (the library copied to another machine, a container image run elsewhere) it would
// stop at an illegal instruction somewhere inside a kernel. Instead, before any other code of the
// program runs (a constructor of the first user priority, in core/isa_guard.cpp, compiled for the
// baseline x86-64 and calling only C functions), the library compares the extensions it was
// compiled for with the processor's; when some are missing it names them, says how to rebuild,
// and exits with status 1. A library built with MG_NATIVE=OFF assumes none and always runs.
// MG_TEST_PROCESSOR_LACKS=avx2,... makes the check treat those as missing (for its test).
#pragma once
#include <cstddef>
#include <cstdint>

namespace mg::isa {

// Bit i of a mask: extension i of core/isa_extensions.def.
// The extensions the library's code was compiled for (isa_compiled.cpp: the compiler's macros).
extern const uint64_t kCompiledExtensions;
// The extensions this processor has (__builtin_cpu_supports: CPUID and the OS's support).
uint64_t processor_extensions();
// The name of extension i ("avx512f"), or nullptr past the last.
const char* extension_name(int i);
// Writes the refusal for a library compiled for `compiled` on a processor with `processor` into
// out (NUL-terminated, cut at `size`) and returns true; false (out untouched) when none is missing.
bool describe_missing(uint64_t compiled, uint64_t processor, char* out, std::size_t size);

}  // namespace mg::isa
