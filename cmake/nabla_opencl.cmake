# nabla_add_opencl_kernels(TARGET [FILE...]): adds OpenCL kernels to operator
# plugin TARGET: its *_opencl.cc sources, and each *.cl embedded, after
# nabla's OpenCL prelude (T, the fp64 pragma, GID, nabla_kahan_add), as the generated header
# <stem>_cl.h declaring `const std::string& nabla::cl_source::<stem>()`.
# Without FILEs it globs both in the calling folder, so a new kernel file
# needs no CMake edit. A .cl is read at configure time: editing it re-runs
# CMake.
#
# One definition for nabla's standard plugins and for plugins built against
# an installed nabla (it is installed next to nablaConfig.cmake, with the
# prelude). The kernels include nabla/opencl/kernel.h (either ABI: over the
# C ABI it is nabla/opencl/sdk_device.h) or nabla/opencl/sdk_kernel.h (the C
# ABI's own smaller API); neither needs a
# library: the OpenCL backend is a device plugin the core loads at run time,
# and an op plugin links neither it nor OpenCL, so it loads, and its CPU
# kernels run, where there is no OpenCL at all.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/nabla_opencl_prelude.cl)
  set_property(GLOBAL PROPERTY NABLA_OPENCL_PRELUDE ${CMAKE_CURRENT_LIST_DIR}/nabla_opencl_prelude.cl)  # installed
else()
  set_property(GLOBAL PROPERTY NABLA_OPENCL_PRELUDE ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl/prelude.cl)
endif()

function(nabla_add_opencl_kernels target)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "nabla_add_opencl_kernels(${target}): no such target; call nabla_add_plugin(${target} ...) first")
  endif()
  set(files ${ARGN})
  if(NOT files)
    file(GLOB files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_opencl.cc ${CMAKE_CURRENT_SOURCE_DIR}/*.cl)
  endif()
  get_property(prelude_file GLOBAL PROPERTY NABLA_OPENCL_PRELUDE)
  file(READ ${prelude_file} prelude)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${prelude_file})
  foreach(file IN LISTS files)
    get_filename_component(path ${file} ABSOLUTE)
    if(NOT path MATCHES "\\.cl$")
      target_sources(${target} PRIVATE ${path})
      continue()
    endif()
    get_filename_component(stem ${path} NAME_WE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(READ ${path} NABLA_CL_TEXT)
    string(PREPEND NABLA_CL_TEXT "${prelude}")
    file(RELATIVE_PATH NABLA_CL_PATH ${PROJECT_SOURCE_DIR} ${path})
    set(NABLA_CL_STEM ${stem})
    file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/opencl_kernels/${stem}_cl.h @ONLY CONTENT [=[
#pragma once
// Generated from @NABLA_CL_PATH@ by nabla_add_opencl_kernels().
#include <string>

namespace nabla::cl_source {

inline const std::string& @NABLA_CL_STEM@() {
  static const std::string text = R"nabla_cl(@NABLA_CL_TEXT@)nabla_cl";
  return text;
}

}  // namespace nabla::cl_source
]=])
  endforeach()
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/opencl_kernels)
  # In nabla's tree: the headers of backends/opencl (an install has them
  # under include/, which every plugin already sees).
  if(TARGET nabla_opencl_headers)
    get_target_property(_defs ${target} COMPILE_DEFINITIONS)
    if("NABLA_PLUGIN_C_ABI=1" IN_LIST _defs)
      # A plugin on the C ABI links nothing of nabla (nabla_opencl_headers
      # brings nabla::core): the headers' folder only.
      get_target_property(_dirs nabla_opencl_headers INTERFACE_INCLUDE_DIRECTORIES)
      target_include_directories(${target} PRIVATE ${_dirs})
    else()
      target_link_libraries(${target} PRIVATE nabla_opencl_headers)
    endif()
  endif()
endfunction()
