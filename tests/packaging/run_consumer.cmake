# The packaging tests (cmake -P). MODE=package: installs this build of mixgrad into a fresh prefix
# under WORK, configures and builds tests/packaging/consumer against it with
# find_package(mixgrad 0.1), runs the program and checks what it printed; then checks that asking
# for 0.2 is refused (SameMinorVersion). Only the prefix is on the consumer's search path, so an
# installed header that still includes "core/..." without the mixgrad/ prefix fails the build.
# MODE=subdirectory or fetchcontent: the consumer builds mixgrad from SOURCE_DIR as a subproject.
# Arguments (-D): MODE BUILD_DIR SOURCE_DIR WORK GENERATOR CXX BUILD_TYPE [MAKE_PROGRAM]
foreach(var MODE BUILD_DIR SOURCE_DIR WORK GENERATOR CXX BUILD_TYPE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer: -D${var}=... is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run_consumer: ${what} failed (${rc}):\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
set(launcher)
find_program(ccache_program ccache)
if(ccache_program)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache_program})
endif()
set(make_program)
if(DEFINED MAKE_PROGRAM AND MAKE_PROGRAM)
  set(make_program -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
set(configure ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/consumer -G ${GENERATOR} ${make_program}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DMG_CONSUMER_MODE=${MODE}
    ${launcher})

function(build_and_run)
  run("configuring the consumer" ${configure} ${ARGN} -B ${WORK}/build)
  run("building the consumer" ${CMAKE_COMMAND} --build ${WORK}/build)
  run("running the consumer" ${WORK}/build/app)
  message(STATUS "${run_output}")
  if(NOT run_output MATCHES "mixgrad consumer: logits bf16, loss [0-9.]+ -> [0-9.]+")
    message(FATAL_ERROR "run_consumer: unexpected output from the consumer:\n${run_output}")
  endif()
endfunction()

if(NOT MODE STREQUAL "package")
  # No build type: the consumer checks that mixgrad does not force one on its parent.
  build_and_run(-DMG_CONSUMER_MIXGRAD_SOURCE=${SOURCE_DIR})
  message(STATUS "run_consumer: built mixgrad as a subproject (${MODE}) and ran the consumer")
  return()
endif()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The installed tree: headers under include/mixgrad/, no sources, the package config and its version.
foreach(f include/mixgrad/mixgrad.h include/mixgrad/core/tensor.h include/mixgrad/ops/op_list.def
          lib/cmake/mixgrad/mixgrad-config.cmake lib/cmake/mixgrad/mixgrad-config-version.cmake
          lib/cmake/mixgrad/mixgrad-targets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "run_consumer: the install has no ${f}")
  endif()
endforeach()
file(GLOB_RECURSE stray RELATIVE ${prefix} ${prefix}/include/*.cpp ${prefix}/include/core/*
     ${prefix}/include/nn/*)
if(stray)
  message(FATAL_ERROR "run_consumer: the install put files outside include/mixgrad/ or installed sources: ${stray}")
endif()

# Every installed header includes the others with the mixgrad/ prefix (a header beside its target,
# like mixgrad.h, would otherwise still compile through the includer's own folder).
file(GLOB_RECURSE headers ${prefix}/include/mixgrad/*)
foreach(header ${headers})
  file(STRINGS ${header} unprefixed REGEX
       "^[ \t]*#[ \t]*include[ \t]+\"((core|autograd|ops|cuda|nn|optim|data|io|amp)/|mixgrad\\.h\")")
  if(unprefixed)
    message(FATAL_ERROR "run_consumer: ${header} includes without the mixgrad/ prefix: ${unprefixed}\n"
                        "  hint: run tools/prefix_includes.sh")
  endif()
  # Nor a header of a build-only dependency the consumer does not have (CUDA's runtime, nlohmann,
  # oneDNN, Eigen, Gloo): such internal headers are left out of the install (cmake/install.cmake).
  file(STRINGS ${header} private_dependency REGEX
       "^[ \t]*#[ \t]*include[ \t]+<(cuda|cublas|cudnn|nccl|nlohmann/|dnnl|oneapi/|Eigen/|gloo/)")
  if(private_dependency)
    message(FATAL_ERROR "run_consumer: ${header} includes a build-only dependency: ${private_dependency}\n"
                        "  hint: add it to MG_INTERNAL_HEADERS in cmake/install.cmake")
  endif()
endforeach()
list(LENGTH headers header_count)

list(APPEND configure -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
build_and_run()

# SameMinorVersion: a project asking for 0.2 must not get 0.1.
execute_process(COMMAND ${configure} -B ${WORK}/build-0.2 -DMG_CONSUMER_VERSION=0.2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "mixgrad-config.cmake, version: 0\\.1\\.")
  message(FATAL_ERROR "run_consumer: find_package(mixgrad 0.2) should refuse 0.1 (rc ${rc}):\n${out}")
endif()
message(STATUS "run_consumer: installed ${header_count} headers, built and ran the consumer; 0.2 refused as expected")
