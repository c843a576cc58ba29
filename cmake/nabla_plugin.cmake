# nabla_add_plugin(NAME SOURCES ... [LIBRARIES ...] [OUTPUT_DIR DIR] [VERSION V] [NO_INSTALL]
#                  [ABI C|CXX] [INCLUDE_DIR DIR]):
# an operator plugin as a MODULE library.
#
# ABI C (the default for plugins built against an installed nabla) builds it
# against nabla's C ABI (nabla/c_api.h, docs/plugin-abi.md): C sources, or C++
# ones through the header-only SDK (the include path puts nabla/sdk/shim
# first, whose nabla/plugin.h, nabla/opkit/opkit.h and the core headers they
# name are nabla/sdk/'s). Such a plugin links nothing
# of nabla, needs no particular compiler and keeps loading into later
# releases; nabla::core and nabla::opkit in LIBRARIES are taken as headers
# only. INCLUDE_DIR replaces nabla's headers (a frozen copy, in tests).
# VERSION (default: the project's VERSION) is the version programs and
# checkpoints record with the plugin's ops (`plugins:`).
# ABI CXX (the default in nabla's tree) links the C++ core as before: This one file serves the standard
# plugins in this tree and third-party plugins built against an installed
# nabla (it is installed next to nablaConfig.cmake), so both are built alike:
#   - hidden visibility and -fno-gnu-unique, so only the entry point and the
#     ABI tag leave the plugin and dlclose really unmaps it;
#   - -Wl,--no-undefined, so a missing core symbol fails the link, not dlopen;
#   - C++17 and the core's compiler (checked at configure time when built
#     against an install: the ABI tag the core checks at load time spells
#     the compiler's major version and the standard-library ABI, read by
#     nabla/plugin.h from the compiler itself);
#   - NABLA_PLUGIN_NAME, the target name as a string, for NABLA_PLUGIN(...);
#   - -ffp-contract=off: loops the op kit runs at the CPU's vector width
#     (nabla/cpu_vectorized.h: AVX-512 and AVX2 + FMA copies) give the bits
#     of the baseline build, which has no FMA to contract a * b + c into.
# Without OUTPUT_DIR the plugin is written to NABLA_PLUGIN_OUTPUT_DIR when it
# is set (the standard plugin folder in this tree) and is installed to
# NABLA_PLUGIN_INSTALL_DIR (default lib/nabla/plugins: the folder an installed
# `nabla` loads by default when the install prefix is nabla's own).
if(NOT DEFINED NABLA_PLUGIN_INSTALL_DIR)
  set(NABLA_PLUGIN_INSTALL_DIR lib/nabla/plugins)
endif()

# Refuses a compiler other than the one nabla was built with. Only an
# installed package sets NABLA_CXX_COMPILER_ID (nablaConfig.cmake).
function(_nabla_check_compiler target)
  if(NOT DEFINED NABLA_CXX_COMPILER_ID)
    return()
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID)
    message(FATAL_ERROR "nabla_add_plugin(${target}): C++ is not enabled in this project; "
      "call project(... LANGUAGES CXX) before nabla_add_plugin")
  endif()
  string(REGEX MATCH "^[0-9]+" _mine "${CMAKE_CXX_COMPILER_VERSION}")
  string(REGEX MATCH "^[0-9]+" _core "${NABLA_CXX_COMPILER_VERSION}")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL NABLA_CXX_COMPILER_ID OR NOT _mine STREQUAL _core)
    message(FATAL_ERROR "nabla_add_plugin(${target}): this project compiles with "
      "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} (${CMAKE_CXX_COMPILER}) but nabla "
      "${nabla_VERSION} was built with ${NABLA_CXX_COMPILER_ID} ${NABLA_CXX_COMPILER_VERSION} "
      "(${NABLA_CXX_COMPILER}); a plugin must use the same compiler and major version (its ABI tag "
      "${NABLA_ABI_TAG} says so): configure a fresh build folder with "
      "-DCMAKE_CXX_COMPILER=${NABLA_CXX_COMPILER}")
  endif()
endfunction()

# The C ABI path: no nabla library, nabla's headers only.
function(_nabla_add_c_abi_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR;ABI;INCLUDE_DIR;VERSION" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  set(_libs "")
  foreach(_lib IN LISTS P_LIBRARIES)
    if(NOT _lib MATCHES "^nabla::(core|opkit|cpu)$")
      list(APPEND _libs ${_lib})
    endif()
  endforeach()
  target_link_libraries(${name} PRIVATE ${_libs})
  if(P_INCLUDE_DIR)
    target_include_directories(${name} PRIVATE ${P_INCLUDE_DIR})
  else()
    # nablaConfig.cmake sets NABLA_INCLUDE_DIR (the op kit's headers are
    # installed there too); in nabla's tree core/ sets NABLA_SDK_INCLUDE_DIR
    # and opkit/ NABLA_SDK_OPKIT_INCLUDE_DIR.
    if(DEFINED NABLA_INCLUDE_DIR)
      set(_inc ${NABLA_INCLUDE_DIR})
      set(_kit "")
    else()
      set(_inc ${NABLA_SDK_INCLUDE_DIR})
      set(_kit ${NABLA_SDK_OPKIT_INCLUDE_DIR})
    endif()
    # The shim first: nabla/plugin.h, nabla/opkit/opkit.h and the core
    # headers the op kit includes become the SDK's.
    target_include_directories(${name} PRIVATE ${_inc}/nabla/sdk/shim ${_inc} ${_kit})
  endif()
  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("CXX" IN_LIST _languages)
    target_compile_features(${name} PRIVATE cxx_std_17)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-gnu-unique>)
    endif()
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
  endif()
  if(NOT NABLA_SANITIZE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  target_compile_definitions(${name} PRIVATE NABLA_PLUGIN_NAME="${name}" NABLA_PLUGIN_C_ABI=1)
  # The manifest's version (NABLA_PLUGIN, nabla/sdk/plugin.h), which programs
  # and checkpoints record with the plugin's ops.
  if(NOT P_VERSION)
    set(P_VERSION "${PROJECT_VERSION}")
  endif()
  if(P_VERSION)
    target_compile_definitions(${name} PRIVATE NABLA_PLUGIN_VERSION="${P_VERSION}")
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_EXTENSIONS OFF
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(P_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
    return()
  endif()
  if(NABLA_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${NABLA_PLUGIN_OUTPUT_DIR})
  endif()
  # A standard plugin of nabla's tree (collective_ops) is one LoadDefaults() needs.
  if(TARGET nabla_standard_plugins)
    add_dependencies(nabla_standard_plugins ${name})
  endif()
  if(NOT P_NO_INSTALL)
    install(TARGETS ${name} LIBRARY DESTINATION ${NABLA_PLUGIN_INSTALL_DIR})
  endif()
endfunction()

function(nabla_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR;ABI;INCLUDE_DIR;VERSION" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_ABI)
    # An installed nabla sets NABLA_CXX_COMPILER_ID: third-party plugins get
    # the stable C ABI; nabla's own tree keeps the C++ one.
    if(DEFINED NABLA_CXX_COMPILER_ID)
      set(P_ABI C)
    else()
      set(P_ABI CXX)
    endif()
  endif()
  if(NOT P_ABI MATCHES "^(C|CXX)$")
    message(FATAL_ERROR "nabla_add_plugin(${name}): expected ABI C or ABI CXX but received ABI ${P_ABI}")
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "nabla_add_plugin(${name}): expected SOURCES file... but received none")
  endif()
  if(P_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "nabla_add_plugin(${name}): unknown arguments ${P_UNPARSED_ARGUMENTS}; "
      "expected SOURCES, LIBRARIES, OUTPUT_DIR, VERSION, NO_INSTALL, ABI, INCLUDE_DIR")
  endif()
  if(P_ABI STREQUAL "C")
    _nabla_add_c_abi_plugin(${name} ${ARGN})
    return()
  endif()
  if(NOT TARGET nabla::core)
    message(FATAL_ERROR "nabla_add_plugin(${name}): no nabla::core target; call find_package(nabla) first")
  endif()
  _nabla_check_compiler(${name})

  add_library(${name} MODULE ${P_SOURCES})
  target_link_libraries(${name} PRIVATE nabla::core ${P_LIBRARIES})
  target_compile_features(${name} PRIVATE cxx_std_17)
  target_compile_options(${name} PRIVATE -fno-gnu-unique -ffp-contract=off)
  if(NOT NABLA_SANITIZE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  target_compile_definitions(${name} PRIVATE NABLA_PLUGIN_NAME="${name}")
  # The version programs and checkpoints record with the plugin's ops
  # (`plugins:`; nabla/plugin_version.h); default: the project's VERSION. A
  # source of its own, so the plugin's own sources compile as before.
  if(NOT P_VERSION)
    set(P_VERSION "${PROJECT_VERSION}")
  endif()
  set(version_cc ${CMAKE_CURRENT_BINARY_DIR}/${name}_plugin_version.cc)
  file(CONFIGURE OUTPUT ${version_cc} CONTENT "// Generated by nabla_add_plugin(${name}): the version the loader reads.
extern \"C\" __attribute__((visibility(\"default\"))) const char* nabla_plugin_version() noexcept {
  return \"${P_VERSION}\";
}
")
  target_sources(${name} PRIVATE ${version_cc})
  # <prefix>/lib/nabla/plugins/../.. is <prefix>/lib, where libnabla_core.so is.
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH "$ORIGIN/../..")

  if(P_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
    return()  # test plugins and the like: never installed
  endif()
  if(NABLA_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${NABLA_PLUGIN_OUTPUT_DIR})
  endif()
  if(TARGET nabla_standard_plugins)
    add_dependencies(nabla_standard_plugins ${name})
  endif()
  if(NOT P_NO_INSTALL)
    install(TARGETS ${name} LIBRARY DESTINATION ${NABLA_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
