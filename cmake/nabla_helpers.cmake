# Every plugin of the standard folder: binaries that LoadDefaults() depend on
# it, wherever their directory comes in the tree.
if(NOT TARGET nabla_standard_plugins)
  add_custom_target(nabla_standard_plugins)
endif()

# nabla_add_plugin(NAME SOURCES ...): an operator plugin as a MODULE library.
# Hidden visibility, -fno-gnu-unique (so dlclose really unmaps, STACK.md §3.4)
# and --no-undefined (a missing core symbol fails the link, not dlopen).
function(nabla_add_plugin name)
  cmake_parse_arguments(P "" "OUTPUT_DIR" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  target_link_libraries(${name} PRIVATE nabla::core ${P_LIBRARIES})
  target_compile_options(${name} PRIVATE -fno-gnu-unique)
  if(NOT NABLA_SANITIZE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  if(NOT P_OUTPUT_DIR)
    set(P_OUTPUT_DIR ${NABLA_PLUGIN_OUTPUT_DIR})
    add_dependencies(nabla_standard_plugins ${name})
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX "lib" LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR}
    INSTALL_RPATH "$ORIGIN/../..")
  target_compile_definitions(${name} PRIVATE NABLA_PLUGIN_NAME="${name}")
endfunction()

# nabla_add_test(NAME SOURCES ... [LIBRARIES ...] [PROPERTIES ...]): one
# GoogleTest binary, discovered at test time so tests that need plugins see a
# finished build. PROPERTIES (ctest test properties such as TIMEOUT) apply to
# every test it discovers.
function(nabla_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBRARIES;PROPERTIES" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBRARIES} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "${NABLA_TEST_ENV}" ${T_PROPERTIES})
endfunction()
