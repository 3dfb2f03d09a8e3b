# The distributed layer (distributed/): process groups over Gloo for CPU tensors. Finds Debian's
# libgloo-dev (GlooConfig.cmake, imported target `gloo`) and says in one line what it did, e.g.
#   mixgrad: distributed (Gloo): enabled, Gloo 0.5.0
#   mixgrad: distributed (Gloo): disabled: Gloo not found (apt-get install libgloo-dev) (MG_WITH_GLOO=AUTO)
# Decision: optional, like CUDA (MG_WITH_GLOO=AUTO|ON|OFF, default AUTO): single-process training
# needs no Gloo, and not every distribution ships it, so a machine without it still builds and
# tests everything else; ON fails when Gloo is missing; scripts/setup installs it, so the
# documented setup always builds the layer. mixgrad-run (launcher/) needs no Gloo and is always
# built.
# Sets MG_GLOO_BUILT (the package config and tests/ read it).
set_property(CACHE MG_WITH_GLOO PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${MG_WITH_GLOO}" mg_gloo_mode)
if(NOT mg_gloo_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "mixgrad: MG_WITH_GLOO must be AUTO, ON or OFF; got '${MG_WITH_GLOO}'")
endif()
set(MG_GLOO_BUILT OFF)
if(mg_gloo_mode STREQUAL "OFF")
  message(STATUS "mixgrad: distributed (Gloo): disabled (MG_WITH_GLOO=OFF)")
  return()
endif()
find_package(Gloo QUIET)
if(NOT Gloo_FOUND OR NOT TARGET gloo)
  if(mg_gloo_mode STREQUAL "ON")
    message(FATAL_ERROR "mixgrad: MG_WITH_GLOO=ON but Gloo was not found\n"
                        "  hint: apt-get install libgloo-dev (or pass -DGloo_DIR=<folder of GlooConfig.cmake>), "
                        "or configure with -DMG_WITH_GLOO=AUTO or OFF")
  endif()
  message(STATUS "mixgrad: distributed (Gloo): disabled: Gloo not found (apt-get install libgloo-dev) (MG_WITH_GLOO=AUTO)")
  return()
endif()
# Debian's GlooTargets file names the library by absolute path (/usr/lib/libgloo.so.0.5.0). When
# the package was unpacked elsewhere (benchmarks/gpu/check.sh unpacks .gpu-deps into a private
# root), use the library under the prefix the config file was found in.
foreach(mg_cfg RELWITHDEBINFO RELEASE NOCONFIG)
  get_target_property(mg_gloo_loc gloo IMPORTED_LOCATION_${mg_cfg})
  if(mg_gloo_loc)
    get_filename_component(mg_gloo_prefix "${Gloo_DIR}/../../.." ABSOLUTE)
    get_filename_component(mg_gloo_name "${mg_gloo_loc}" NAME)
    unset(mg_gloo_relocated CACHE)
    find_file(mg_gloo_relocated ${mg_gloo_name} PATHS ${mg_gloo_prefix}/lib ${mg_gloo_prefix}/lib/x86_64-linux-gnu
              NO_DEFAULT_PATH)
    if(mg_gloo_relocated)
      set_target_properties(gloo PROPERTIES IMPORTED_LOCATION_${mg_cfg} "${mg_gloo_relocated}")
    endif()
  endif()
endforeach()
set(MG_GLOO_BUILT ON)
message(STATUS "mixgrad: distributed (Gloo): enabled, Gloo ${GLOO_VERSION}")
