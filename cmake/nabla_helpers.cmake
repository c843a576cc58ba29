# Every plugin of the standard folder: binaries that LoadDefaults() depend on
# it, wherever their directory comes in the tree.
if(NOT TARGET nabla_standard_plugins)
  add_custom_target(nabla_standard_plugins)
endif()

# nabla_add_plugin(): one definition, shared with third-party plugins through
# the installed package (see nabla_plugin.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/nabla_plugin.cmake)

# nabla_add_test(NAME SOURCES ... [LIBRARIES ...] [PROPERTIES ...]): one
# GoogleTest binary, discovered at test time so tests that need plugins see a
# finished build. PROPERTIES (ctest test properties such as TIMEOUT) apply to
# every test it discovers.
function(nabla_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBRARIES;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBRARIES} GTest::gtest GTest::gtest_main)
  # tests/common/: helpers shared by the suites (e.g. running the binary).
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  # The environment comes from tests/CMakeLists.txt's test_env.cmake.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST PROPERTIES ${T_PROPERTIES})
endfunction()

# nabla_add_opencl_kernels(): an op plugin's OpenCL kernels, shared with
# third-party plugins through the installed package.
include(${CMAKE_CURRENT_LIST_DIR}/nabla_opencl.cmake)
