# The optional CUDA backend. AUTO enables it when nvcc is found; the CUDA sources live in cuda/
# and register their kernels from register_cuda_kernels(). Nothing outside cuda/ includes a CUDA
# header.
include(CheckLanguage)
set(MG_HAVE_CUDA OFF)
if(NOT MG_WITH_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MG_HAVE_CUDA ON)
  elseif(MG_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MG_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

file(GLOB MG_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cu
     ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cpp)
if(MG_HAVE_CUDA AND MG_CUDA_SOURCES)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper; "native" fails on machines without a GPU
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_sources(mixgrad PRIVATE ${MG_CUDA_SOURCES})
  target_compile_definitions(mixgrad PUBLIC MG_WITH_CUDA=1)
  target_link_libraries(mixgrad PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
  message(STATUS "mixgrad: CUDA backend enabled (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "mixgrad: CPU-only build")
endif()
