# MG_WITH_CUDA=EMULATE: the CUDA backend built for the CPU against the CUDA emulator
# (cuda/emulator/, docs/cuda_emulator.md), so that every [gpu] test runs, kernels included, on a
# machine without a GPU. Needs the CUDA Toolkit's headers (cuda_runtime.h, cublasLt.h, cudnn.h)
# but links none of its libraries and does not need nvcc to run anything: each
# cuda/kernels/*.cu and every CUDA header (cuda/*.cuh, cuda/kernels/*.cuh) is copied by rewrite_launches (its `<<<...>>>` launches become
# emulator calls) into the build folder and compiled as C++ with the emulator's device-side
# header; cuda/*.cpp compile unchanged against the emulated cudart, cuBLASLt and cuDNN.
# Sets MG_CUDA_EMULATED; MG_CUDA_BUILT stays OFF (the library is not a CUDA build to link against).
set(MG_CUDA_EMULATED ON)

find_package(CUDAToolkit QUIET)
find_path(MG_CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT
          PATH_SUFFIXES include)
if(NOT CUDAToolkit_FOUND OR NOT MG_CUDNN_INCLUDE_DIR)
  message(FATAL_ERROR "mixgrad: MG_WITH_CUDA=EMULATE needs the CUDA Toolkit's and cuDNN's headers "
                      "(pass -DCUDAToolkit_ROOT=<toolkit folder> or -DCUDNN_ROOT=<cuDNN folder>)")
endif()

add_executable(mg_rewrite_launches ${PROJECT_SOURCE_DIR}/cuda/emulator/rewrite_launches.cpp)
set(mg_emu_root ${PROJECT_BINARY_DIR}/cuda_emulator)
file(GLOB mg_cuda_kernel_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/*.cuh
     ${PROJECT_SOURCE_DIR}/cuda/kernels/*.cu ${PROJECT_SOURCE_DIR}/cuda/kernels/*.cuh)
set(mg_emu_rewritten)
set(mg_emu_headers)
foreach(f ${mg_cuda_kernel_files})
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${f})
  get_filename_component(rel_dir ${rel} DIRECTORY)
  file(MAKE_DIRECTORY ${mg_emu_root}/mixgrad/${rel_dir})
  if(rel MATCHES "\\.cu$")
    set(out ${mg_emu_root}/mixgrad/${rel}.cpp)
    list(APPEND mg_emu_rewritten ${out})
  else()
    set(out ${mg_emu_root}/mixgrad/${rel})
    list(APPEND mg_emu_headers ${out})
  endif()
  add_custom_command(OUTPUT ${out} COMMAND mg_rewrite_launches ${f} ${out} DEPENDS mg_rewrite_launches ${f}
                     COMMENT "rewrite_launches ${rel}" VERBATIM)
endforeach()
# The rewritten headers exist before any kernel file compiles.
add_custom_target(mg_emu_rewritten_headers DEPENDS ${mg_emu_headers})
add_dependencies(mixgrad mg_emu_rewritten_headers)

file(GLOB mg_emu_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/*.cpp ${PROJECT_SOURCE_DIR}/cuda/emulator/*.cpp)
list(REMOVE_ITEM mg_emu_sources ${PROJECT_SOURCE_DIR}/cuda/nccl_comm.cpp
     ${PROJECT_SOURCE_DIR}/cuda/emulator/rewrite_launches.cpp)
target_sources(mixgrad PRIVATE ${mg_emu_sources} ${mg_emu_rewritten} ${PROJECT_SOURCE_DIR}/cuda/absent/nccl_absent.cpp)
# The toolkit's headers as a CUDA build gets them (through CUDA::toolkit, which CUDA::cudart
# carries there), and cuDNN's: every C++ object outside cuda/ compiles with the same command as in
# the CUDA build and the CPU-only passes, so ccache serves it.
target_link_libraries(mixgrad PUBLIC CUDA::toolkit)
target_include_directories(mixgrad PRIVATE ${MG_CUDNN_INCLUDE_DIR})
# Kernels: their rewritten headers first (-iquote: the kernels include them in quotes), the
# device-side language, no FMA contraction (each product rounded, as the emulator's __fmul_rn
# promises), and CUDA's #pragma unroll ignored. And the GPU's alignment rule: a GPU faults
# ("misaligned address") on a load or store not aligned to its type's size (a 16-byte vector from
# a view one element in), where x86 does not care; UBSan's alignment check stops the process there
# with the kernel's file and line.
# (A compiler without the UBSan runtime, e.g. clang without compiler-rt, builds without it.)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=alignment)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=alignment)
check_cxx_source_compiles("int main(int c, char** v) { return *reinterpret_cast<int*>(v[0] + c); }" MG_EMU_HAS_UBSAN_ALIGNMENT)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
set(mg_emu_kernel_options "-iquote;${mg_emu_root};-include;mixgrad/cuda/emulator/device_side.h;-Wno-unknown-pragmas;-ffp-contract=off")
if(MG_EMU_HAS_UBSAN_ALIGNMENT)
  list(APPEND mg_emu_kernel_options -fsanitize=alignment -fno-sanitize-recover=alignment)
  target_link_options(mixgrad PUBLIC -fsanitize=alignment)
else()
  message(STATUS "mixgrad: the CUDA emulator's alignment check is off: ${CMAKE_CXX_COMPILER} cannot link -fsanitize=alignment")
endif()
set_source_files_properties(${mg_emu_rewritten} PROPERTIES COMPILE_OPTIONS "${mg_emu_kernel_options}")
set_property(SOURCE ${PROJECT_SOURCE_DIR}/ops/init.cpp TARGET_DIRECTORY mixgrad APPEND PROPERTY
             COMPILE_DEFINITIONS MG_WITH_CUDA=1)
message(STATUS "mixgrad: CUDA backend: emulated on the CPU (MG_WITH_CUDA=EMULATE; CUDA ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR} headers, no GPU used)")
