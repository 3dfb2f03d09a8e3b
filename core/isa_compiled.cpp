// The instruction set extensions this library's code was compiled for (core/isa_guard.h): the
// compiler's macros under the library's own flags (-march=native with MG_NATIVE=ON). Data only,
// no code, so reading it is safe on any processor. Bit i is extension i of isa_extensions.def.
#include <cstdint>

#include "mixgrad/core/isa_guard.h"

namespace mg::isa {

extern const uint64_t kCompiledExtensions = uint64_t(0)
#ifdef __SSE3__
    | (uint64_t(1) << 0)  // sse3
#endif
#ifdef __SSSE3__
    | (uint64_t(1) << 1)  // ssse3
#endif
#ifdef __SSE4_1__
    | (uint64_t(1) << 2)  // sse4.1
#endif
#ifdef __SSE4_2__
    | (uint64_t(1) << 3)  // sse4.2
#endif
#ifdef __POPCNT__
    | (uint64_t(1) << 4)  // popcnt
#endif
#ifdef __AVX__
    | (uint64_t(1) << 5)  // avx
#endif
#ifdef __AVX2__
    | (uint64_t(1) << 6)  // avx2
#endif
#ifdef __FMA__
    | (uint64_t(1) << 7)  // fma
#endif
#ifdef __BMI__
    | (uint64_t(1) << 8)  // bmi
#endif
#ifdef __BMI2__
    | (uint64_t(1) << 9)  // bmi2
#endif
#ifdef __AVX512F__
    | (uint64_t(1) << 10)  // avx512f
#endif
#ifdef __AVX512BW__
    | (uint64_t(1) << 11)  // avx512bw
#endif
#ifdef __AVX512DQ__
    | (uint64_t(1) << 12)  // avx512dq
#endif
#ifdef __AVX512VL__
    | (uint64_t(1) << 13)  // avx512vl
#endif
#ifdef __AVX512CD__
    | (uint64_t(1) << 14)  // avx512cd
#endif
#ifdef __AVX512VNNI__
    | (uint64_t(1) << 15)  // avx512vnni
#endif
#ifdef __AVX512BF16__
    | (uint64_t(1) << 16)  // avx512bf16
#endif
#ifdef __AVX512VBMI__
    | (uint64_t(1) << 17)  // avx512vbmi
#endif
#ifdef __AVX512VBMI2__
    | (uint64_t(1) << 18)  // avx512vbmi2
#endif
#ifdef __AVX512BITALG__
    | (uint64_t(1) << 19)  // avx512bitalg
#endif
#ifdef __AVX512VPOPCNTDQ__
    | (uint64_t(1) << 20)  // avx512vpopcntdq
#endif
#ifdef __AVX512IFMA__
    | (uint64_t(1) << 21)  // avx512ifma
#endif
#ifdef __GFNI__
    | (uint64_t(1) << 22)  // gfni
#endif
#ifdef __VPCLMULQDQ__
    | (uint64_t(1) << 23)  // vpclmulqdq
#endif
#ifdef __AES__
    | (uint64_t(1) << 24)  // aes
#endif
#ifdef __PCLMUL__
    | (uint64_t(1) << 25)  // pclmul
#endif
;

}  // namespace mg::isa
