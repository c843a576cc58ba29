# Every plugin of the standard folder: binaries that LoadDefaults() depend on
# it, wherever their directory comes in the tree.
if(NOT TARGET nabla_standard_plugins)
  add_custom_target(nabla_standard_plugins)
endif()

# nabla_plugin_pch(TARGET HEADER...): the headers every op file of an
# in-tree plugin includes, parsed once into a precompiled header rather
# than once per file: math_ops compiled in 306 CPU s instead of 372 (Release,
# 2-core Zen 5), and the Release, ASan and TSan builds each compile the
# plugins. Not part of the installed nabla_add_plugin: a plugin author's
# build is theirs to tune.
option(NABLA_PCH "Precompile the standard plugins' common headers" ON)
function(nabla_plugin_pch target)
  if(NABLA_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

# nabla_add_plugin(): one definition, shared with third-party plugins through
# the installed package (see nabla_plugin.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/nabla_plugin.cmake)

# nabla_add_test(NAME SOURCES ... [LIBRARIES ...] [PROPERTIES ...]): one
# GoogleTest binary. PROPERTIES (ctest test properties such as TIMEOUT) apply
# to every test it makes.
#
# A ctest test per GoogleTest case, discovered at test time so tests that
# need plugins see a finished build; but in the AddressSanitizer build one
# ctest test for the whole binary. There a process start is dear
# (instrumented libraries relocated, four plugins registering through the C
# ABI): the op table's 110 cases took 56 s at -j2 as 110 processes and 3.3 s
# as one, and the whole ASan ctest went from 1291 processes to 60 (3 min 40 s
# on a 2-core Zen 5). Every case still runs under the sanitizers; the
# Release and TSan builds keep a process per case.
function(nabla_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBRARIES;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBRARIES} GTest::gtest GTest::gtest_main)
  # tests/common/: helpers shared by the suites (e.g. running the binary).
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  # The environment comes from tests/CMakeLists.txt's test_env.cmake.
  if(NABLA_SANITIZE STREQUAL "address")
    add_test(NAME ${name} COMMAND ${name})
    if(T_PROPERTIES)
      set_tests_properties(${name} PROPERTIES ${T_PROPERTIES})
    endif()
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST PROPERTIES ${T_PROPERTIES})
  endif()
endfunction()

# nabla_add_opencl_kernels(): an op plugin's OpenCL kernels, shared with
# third-party plugins through the installed package.
include(${CMAKE_CURRENT_LIST_DIR}/nabla_opencl.cmake)
