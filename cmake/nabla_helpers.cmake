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

# Device backends other than the CPU register themselves from a static
# initializer when their shared library loads (see nabla/device_registry.h),
# so an app names no backend in its code: it calls nabla_link_device_backends
# and --device resolves to whatever was built. The link is kept with
# --no-as-needed because the app references no symbol of the backend.
set(CMAKE_LINK_LIBRARY_USING_NABLA_KEEP "LINKER:--push-state,--no-as-needed" "<LINK_ITEM>" "LINKER:--pop-state")
set(CMAKE_LINK_LIBRARY_USING_NABLA_KEEP_SUPPORTED TRUE)
function(nabla_register_device_backend target)
  set_property(GLOBAL APPEND PROPERTY NABLA_DEVICE_BACKENDS ${target})
endfunction()
function(nabla_link_device_backends target scope)
  get_property(backends GLOBAL PROPERTY NABLA_DEVICE_BACKENDS)
  foreach(b ${backends})
    target_link_libraries(${target} ${scope} "$<LINK_LIBRARY:NABLA_KEEP,${b}>")
  endforeach()
endfunction()
