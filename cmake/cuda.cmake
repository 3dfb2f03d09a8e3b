# The optional CUDA backend: finds nvcc, the CUDA Toolkit's libraries, cuDNN and NCCL (all outside
# Debian's archive) and says in one line what it found, e.g.
#   mixgrad: CUDA backend: enabled (sm_90), CUDA 13.0, cuDNN 9.19.0, NCCL 2.28.9
#   mixgrad: CUDA backend: disabled: no nvcc (MG_WITH_CUDA=AUTO)
# Decision: MG_WITH_CUDA=AUTO never fails (a missing piece disables the backend and the message
# says which); ON fails with a message naming what is missing and how to point CMake at it; OFF
# looks for nothing. cuDNN is required for the backend, NCCL is optional (multi-GPU data parallel).
# The CUDA sources live in cuda/ and register their kernels from
# register_cuda_kernels(); nothing outside cuda/ includes a CUDA header.
# Sets MG_CUDA_BUILT (the library was built with CUDA; the package config reads it) and
# MG_NCCL_BUILT (cuda/nccl_comm.cpp over NCCL; otherwise cuda/absent/nccl_absent.cpp).
include(CheckLanguage)

set_property(CACHE MG_WITH_CUDA PROPERTY STRINGS AUTO ON OFF EMULATE)
string(TOUPPER "${MG_WITH_CUDA}" mg_cuda_mode)
if(NOT mg_cuda_mode MATCHES "^(AUTO|ON|OFF|EMULATE)$")
  message(FATAL_ERROR "mixgrad: MG_WITH_CUDA must be AUTO, ON, OFF or EMULATE; got '${MG_WITH_CUDA}'")
endif()

set(MG_CUDA_BUILT OFF)
set(MG_NCCL_BUILT OFF)
set(MG_CUDA_EMULATED OFF)
if(mg_cuda_mode STREQUAL "EMULATE")
  include(${CMAKE_CURRENT_LIST_DIR}/cuda_emulator.cmake)
  return()
endif()
set(mg_cuda_missing)  # what the backend needs and was not found, one "what (hint)" per entry

if(mg_cuda_mode STREQUAL "OFF")
  message(STATUS "mixgrad: CUDA backend: disabled (MG_WITH_CUDA=OFF)")
  return()
endif()

check_language(CUDA)
if(CMAKE_CUDA_COMPILER AND NOT IS_ABSOLUTE "${CMAKE_CUDA_COMPILER}")
  find_program(mg_nvcc_path "${CMAKE_CUDA_COMPILER}")
  if(mg_nvcc_path)
    set(CMAKE_CUDA_COMPILER "${mg_nvcc_path}")
  endif()
endif()
if(CMAKE_CUDA_COMPILER AND NOT EXISTS "${CMAKE_CUDA_COMPILER}")
  list(APPEND mg_cuda_missing "nvcc: CMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER} does not exist (pass the path of the toolkit's bin/nvcc)")
elseif(NOT CMAKE_CUDA_COMPILER)
  list(APPEND mg_cuda_missing "no nvcc (put the CUDA Toolkit's bin/ on PATH or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)")
else()
  # Find the toolkit that belongs to the nvcc found above.
  if(NOT DEFINED CUDAToolkit_ROOT)
    get_filename_component(mg_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${mg_nvcc_dir}" DIRECTORY)
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND mg_cuda_missing "the CUDA Toolkit's libraries next to ${CMAKE_CUDA_COMPILER} (pass -DCUDAToolkit_ROOT=<toolkit folder>)")
  else()
    foreach(lib cudart cublas cublasLt)
      if(NOT TARGET CUDA::${lib})
        list(APPEND mg_cuda_missing "lib${lib} in ${CUDAToolkit_LIBRARY_DIR} (install the toolkit's ${lib} component)")
      endif()
    endforeach()
  endif()

  # cuDNN and NCCL usually sit in the toolkit's folders; CUDNN_ROOT / NCCL_ROOT point elsewhere.
  find_path(MG_CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
            ENV CUDNN_ROOT PATH_SUFFIXES include)
  find_library(MG_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT
               PATH_SUFFIXES lib lib64)
  set(mg_cudnn_version "")
  if(MG_CUDNN_INCLUDE_DIR)
    file(STRINGS "${MG_CUDNN_INCLUDE_DIR}/cudnn_version.h" mg_lines
         REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
    string(REGEX REPLACE ".*CUDNN_MAJOR +([0-9]+).*CUDNN_MINOR +([0-9]+).*CUDNN_PATCHLEVEL +([0-9]+).*"
           "\\1.\\2.\\3" mg_cudnn_version "${mg_lines}")
  endif()
  if(NOT MG_CUDNN_INCLUDE_DIR OR NOT MG_CUDNN_LIBRARY)
    list(APPEND mg_cuda_missing "cuDNN (cudnn_version.h and libcudnn; pass -DCUDNN_ROOT=<cuDNN folder> or install it into the toolkit)")
  elseif(mg_cudnn_version VERSION_LESS 9)
    list(APPEND mg_cuda_missing "cuDNN 9 or newer (found ${mg_cudnn_version} in ${MG_CUDNN_INCLUDE_DIR})")
  endif()

  find_path(MG_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT
            PATH_SUFFIXES include)
  find_library(MG_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT
               PATH_SUFFIXES lib lib64)
  set(mg_nccl_text "no NCCL (optional: multi-GPU data parallel; pass -DNCCL_ROOT=<NCCL folder>)")
  if(MG_NCCL_INCLUDE_DIR AND MG_NCCL_LIBRARY)
    file(STRINGS "${MG_NCCL_INCLUDE_DIR}/nccl.h" mg_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
    string(REGEX REPLACE ".*NCCL_MAJOR +([0-9]+).*NCCL_MINOR +([0-9]+).*NCCL_PATCH +([0-9]+).*"
           "\\1.\\2.\\3" mg_nccl_version "${mg_lines}")
    set(mg_nccl_text "NCCL ${mg_nccl_version}")
  endif()
endif()

if(mg_cuda_missing)
  list(JOIN mg_cuda_missing "; " mg_text)
  if(mg_cuda_mode STREQUAL "ON")
    list(JOIN mg_cuda_missing "\n  - " mg_list)
    message(FATAL_ERROR "mixgrad: MG_WITH_CUDA=ON but the CUDA backend cannot be built; missing:\n"
                        "  - ${mg_list}\n"
                        "  hint: fix the above, or configure with -DMG_WITH_CUDA=AUTO (CUDA when "
                        "everything is found) or -DMG_WITH_CUDA=OFF (CPU only)")
  endif()
  message(STATUS "mixgrad: CUDA backend: disabled: ${mg_text} (MG_WITH_CUDA=AUTO)")
  return()
endif()

# Everything is there. Hopper by default; "native" fails on machines without a GPU. Overridable:
# -DCMAKE_CUDA_ARCHITECTURES="80;90".
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures to build for (90 = Hopper)")
endif()
set(mg_arch_text)
foreach(arch ${CMAKE_CUDA_ARCHITECTURES})
  string(REGEX REPLACE "-(real|virtual)$" "" arch "${arch}")
  list(APPEND mg_arch_text "sm_${arch}")
endforeach()
list(JOIN mg_arch_text ", " mg_arch_text)

# cuda/*.cpp (runtime, allocator, cuBLASLt; host code that calls the CUDA libraries) and
# cuda/kernels/*.cu; cuda/host/ is built in every build (CMakeLists.txt) and cuda/absent/ only
# without the backend.
file(GLOB MG_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/*.cpp ${PROJECT_SOURCE_DIR}/cuda/*.cu
     ${PROJECT_SOURCE_DIR}/cuda/kernels/*.cu)
if(NOT (MG_NCCL_LIBRARY AND MG_NCCL_INCLUDE_DIR))
  list(REMOVE_ITEM MG_CUDA_SOURCES ${PROJECT_SOURCE_DIR}/cuda/nccl_comm.cpp)
endif()

enable_language(CUDA)
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  # CMake 3.25 does not know nvcc 12's C++20 flag; the library's cxx_std_20 asks for it.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
# The shared functors call std:: math and numeric_limits from host-device code (constexpr
# host functions in device code need --expt-relaxed-constexpr); warnings as for the C++ code.
target_compile_options(mixgrad PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr
                       -Xcompiler=-Wall,-Wno-unused-parameter>)
# The target was created before the architectures were chosen.
set_target_properties(mixgrad PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_sources(mixgrad PRIVATE ${MG_CUDA_SOURCES})
# Only ops/init.cpp asks whether the backend is built (to call register_cuda_kernels()); the
# define stays off every other object, so a CUDA build and a CPU-only build share their compiled
# C++ objects through ccache. Programs ask at run time: mg::cuda::built_with_cuda().
set_property(SOURCE ${PROJECT_SOURCE_DIR}/ops/init.cpp TARGET_DIRECTORY mixgrad APPEND PROPERTY
             COMPILE_DEFINITIONS MG_WITH_CUDA=1)
target_include_directories(mixgrad PRIVATE ${MG_CUDNN_INCLUDE_DIR})
# cuBLASLt is not linked: cuda/lazy/cublaslt_loader.cpp opens it at the first GEMM (linking it costs
# every process about 210 MiB of resident memory at start, GPU or not), from the loader's search
# path or else the toolkit's library folder.
target_sources(mixgrad PRIVATE ${PROJECT_SOURCE_DIR}/cuda/lazy/cublaslt_loader.cpp)
set_property(SOURCE ${PROJECT_SOURCE_DIR}/cuda/lazy/cublaslt_loader.cpp TARGET_DIRECTORY mixgrad APPEND PROPERTY
             COMPILE_DEFINITIONS MG_CUBLASLT_DIR="${CUDAToolkit_LIBRARY_DIR}")
target_link_libraries(mixgrad PUBLIC CUDA::cudart PRIVATE ${MG_CUDNN_LIBRARY} ${CMAKE_DL_LIBS})
if(MG_NCCL_LIBRARY AND MG_NCCL_INCLUDE_DIR)
  # cuda/nccl_comm.cpp is the only file that includes nccl.h.
  target_include_directories(mixgrad PRIVATE ${MG_NCCL_INCLUDE_DIR})
  target_link_libraries(mixgrad PRIVATE ${MG_NCCL_LIBRARY})
  set(MG_NCCL_BUILT ON)
else()
  # NcclComm without NCCL: every call throws saying why (as in a build without CUDA).
  target_sources(mixgrad PRIVATE ${PROJECT_SOURCE_DIR}/cuda/absent/nccl_absent.cpp)
endif()
set(MG_CUDA_BUILT ON)
message(STATUS "mixgrad: CUDA backend: enabled (${mg_arch_text}), CUDA ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}, cuDNN ${mg_cudnn_version}, ${mg_nccl_text}")
