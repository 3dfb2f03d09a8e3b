# `cmake --install`: the headers under <prefix>/include/mixgrad/ (layer folders kept, mixgrad.h at
# include/mixgrad/mixgrad.h), libmixgrad, and a CMake package (lib/cmake/mixgrad/) exporting
# mixgrad::mixgrad, so that a user's project reads
#   find_package(mixgrad 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE mixgrad::mixgrad)
# Decision: SameMinorVersion compatibility. Before 1.0 a minor release may change the API, so a
# project asking for 0.1 accepts 0.1.x and refuses 0.2.
include(CMakePackageConfigHelpers)

# Internal headers that include a build-only dependency (CUDA's runtime and libraries, nlohmann,
# oneDNN) — and the headers that include them — are not installed: a consumer has none of those
# headers, and mixgrad.h reaches none of them (the packaging test checks every installed header).
set(MG_INTERNAL_HEADERS
    cuda/kernels cuda/emulator/device_side.h cuda/emulator/runtime_state.h cuda/check.h cuda/blas_check.h cuda/dnn_check.h cuda/capture.h
    cuda/multi_tensor_apply.cuh io/json_parse.h ops/cpu/onednn_runtime.h)
set(MG_INTERNAL_PATTERNS)
foreach(h ${MG_INTERNAL_HEADERS})
  list(APPEND MG_INTERNAL_PATTERNS PATTERN "${h}" EXCLUDE)
endforeach()
foreach(layer ${MG_LAYERS})
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixgrad
            COMPONENT mixgrad_development
            FILES_MATCHING PATTERN "*.h" PATTERN "*.def" PATTERN "*.cuh" ${MG_INTERNAL_PATTERNS})
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/mixgrad.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixgrad
        COMPONENT mixgrad_development)

install(TARGETS mixgrad EXPORT mixgrad-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT mixgrad_development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT mixgrad_runtime
                NAMELINK_COMPONENT mixgrad_development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT mixgrad_runtime)

set(MG_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mixgrad)
install(EXPORT mixgrad-targets NAMESPACE mixgrad:: DESTINATION ${MG_CONFIG_DIR}
        COMPONENT mixgrad_development)

# What the config file must find again for the consumer: the public dependencies always, and a
# static library's private ones too (the consumer's link line must name them).
if(MG_BUILD_SHARED)
  set(MG_CONFIG_STATIC OFF)
else()
  set(MG_CONFIG_STATIC ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mixgrad-config.cmake.in
                              ${PROJECT_BINARY_DIR}/mixgrad-config.cmake
                              INSTALL_DESTINATION ${MG_CONFIG_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mixgrad-config-version.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mixgrad-config.cmake
              ${PROJECT_BINARY_DIR}/mixgrad-config-version.cmake
        DESTINATION ${MG_CONFIG_DIR} COMPONENT mixgrad_development)
