// The libFuzzer entry point, compiled once per harness by scripts/fuzz with
// -DMG_FUZZ_TARGET=fuzz_<name> (clang -fsanitize=fuzzer). It lives in a subfolder so that the
// default (gcc) test build, which globs tests/fuzz/*.cpp, never sees it.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_harness.h"

#ifndef MG_FUZZ_TARGET
#error "build with -DMG_FUZZ_TARGET=fuzz_safetensors (or fuzz_checkpoint, fuzz_idx, fuzz_vocab, fuzz_hf_bert)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return mg::fuzz::MG_FUZZ_TARGET(data, size);
}
