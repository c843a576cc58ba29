# The installed CMake package: nablaConfig.cmake, its version file, the
# exported targets (nabla::core, nabla::cpu, nabla::opkit, nabla::train, nabla::onnx, nabla::nabla) and nabla_plugin.cmake, the
# one definition of nabla_add_plugin() that the standard plugins use too.
# Paths are fixed (not GNUInstallDirs): `nabla` finds its standard plugins at
# ../lib/nabla/plugins relative to itself (PluginManager::DefaultPluginDir).
include(CMakePackageConfigHelpers)

set(NABLA_INSTALL_BINDIR bin)
set(NABLA_INSTALL_INCLUDEDIR include)
set(NABLA_INSTALL_PLUGINDIR lib/nabla/plugins)
set(NABLA_INSTALL_CMAKEDIR lib/cmake/nabla)

# The tag nabla/plugin.h spells (NABLA_ABI_SYMBOL), for messages and docs.
file(STRINGS ${PROJECT_SOURCE_DIR}/core/include/nabla/plugin.h _abi_line REGEX "^#define NABLA_ABI_VERSION ")
string(REGEX REPLACE "^#define NABLA_ABI_VERSION +([0-9]+).*" "\\1" NABLA_ABI_VERSION "${_abi_line}")
string(REGEX MATCH "^[0-9]+" _gcc_major "${CMAKE_CXX_COMPILER_VERSION}")
set(NABLA_ABI_TAG "nabla_abi_v${NABLA_ABI_VERSION}_gcc${_gcc_major}_cxx11abi1")

install(EXPORT nablaTargets NAMESPACE nabla:: DESTINATION ${NABLA_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nablaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/nablaConfig.cmake
  INSTALL_DESTINATION ${NABLA_INSTALL_CMAKEDIR}
  PATH_VARS NABLA_INSTALL_INCLUDEDIR NABLA_INSTALL_PLUGINDIR NABLA_INSTALL_BINDIR)
# 0.x: a new minor version may change the plugin interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/nablaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/nablaConfig.cmake
  ${PROJECT_BINARY_DIR}/package/nablaConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/nabla_plugin.cmake
  ${PROJECT_SOURCE_DIR}/cmake/nabla_opencl.cmake
  DESTINATION ${NABLA_INSTALL_CMAKEDIR})
# OpenCL kernels in a plugin built against the install: the headers
# (nabla/opencl/kernel.h for the C++ ABI, sdk_kernel.h and opencl_c.h for the
# C ABI), and the prelude nabla_add_opencl_kernels() puts before each .cl.
# Header-only: whether this nabla was built with OpenCL or not, a plugin may
# carry OpenCL kernels; they run where the OpenCL device plugin is installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/backends/opencl/include/nabla DESTINATION ${NABLA_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/backends/opencl/cl/prelude.cl DESTINATION ${NABLA_INSTALL_CMAKEDIR}
  RENAME nabla_opencl_prelude.cl)

# The guides an installed nabla's users and plugin authors read (the README
# `nabla plugin new` writes points here).
install(FILES
  ${PROJECT_SOURCE_DIR}/docs/writing-plugins.md
  ${PROJECT_SOURCE_DIR}/docs/program-format.md
  ${PROJECT_SOURCE_DIR}/docs/run-config.md
  ${PROJECT_SOURCE_DIR}/docs/cli.md
  ${PROJECT_SOURCE_DIR}/docs/ops.md
  DESTINATION share/doc/nabla)
