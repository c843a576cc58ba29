# One find_package per dependency (checked on Debian 12's packages), wrapped
# in small INTERFACE adapters so the rest of the tree never spells vendor names.
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(TBB 2021 REQUIRED CONFIG)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_package(yaml-cpp REQUIRED CONFIG)
find_package(CLI11 REQUIRED CONFIG)
find_package(fmt REQUIRED CONFIG)
find_package(nlohmann_json 3 REQUIRED CONFIG)
find_package(ZLIB REQUIRED)
if(NABLA_BUILD_TESTS)
  find_package(GTest REQUIRED CONFIG)
endif()

include(CheckIncludeFileCXX)
check_include_file_cxx(cblas.h NABLA_HAVE_CBLAS_H)
if(NOT NABLA_HAVE_CBLAS_H)
  message(FATAL_ERROR "cblas.h not found: install libopenblas-dev")
endif()

# Boost.DLL with std::filesystem: no libboost_* at link time.
add_library(nabla_dep_dll INTERFACE)
target_link_libraries(nabla_dep_dll INTERFACE Boost::headers ${CMAKE_DL_LIBS})
target_compile_definitions(nabla_dep_dll INTERFACE BOOST_DLL_USE_STD_FS)
add_library(dep::dll ALIAS nabla_dep_dll)

add_library(nabla_dep_blas INTERFACE)
target_link_libraries(nabla_dep_blas INTERFACE BLAS::BLAS)
add_library(dep::blas ALIAS nabla_dep_blas)

add_library(nabla_dep_yaml INTERFACE)
target_link_libraries(nabla_dep_yaml INTERFACE yaml-cpp)
add_library(dep::yaml ALIAS nabla_dep_yaml)

# OpenCL through the ICD loader, CLBlast for GEMM: CLBlast
# has no version file and its target no link interface.
option(NABLA_WITH_OPENCL "Build the OpenCL backend (needs OpenCL and CLBlast)" ON)
if(NABLA_WITH_OPENCL)
  find_package(OpenCL REQUIRED)
  find_package(CLBlast REQUIRED CONFIG)
  add_library(nabla_dep_opencl INTERFACE)
  target_link_libraries(nabla_dep_opencl INTERFACE clblast OpenCL::OpenCL)
  target_compile_definitions(nabla_dep_opencl INTERFACE CL_TARGET_OPENCL_VERSION=120)
  add_library(dep::opencl ALIAS nabla_dep_opencl)
endif()

# oneDNN (Debian's libdnnl-dev, built on OpenMP) for the float32 conv2d and
# pool2d kernels of plugins/nn_ops; without it they run im2col + GEMM.
# Sanitizer builds run the reference kernels instead: LeakSanitizer's exit-time
# tracer crashes ("Tracer caught signal 11") in any process that ran oneDNN's
# JIT code, so every such test would fail at exit. (valgrind finds nothing on
# the oneDNN path.)
option(NABLA_WITH_DNNL "Use oneDNN for float32 convolution and pooling" ON)
if(NABLA_WITH_DNNL AND NABLA_SANITIZE)
  message(STATUS "NABLA_SANITIZE=${NABLA_SANITIZE}: conv2d/pool2d use the reference kernels, not oneDNN")
elseif(NABLA_WITH_DNNL)
  find_package(dnnl CONFIG)
  find_package(OpenMP COMPONENTS CXX)
  if(dnnl_FOUND AND OpenMP_CXX_FOUND)
    add_library(nabla_dep_dnnl INTERFACE)
    target_link_libraries(nabla_dep_dnnl INTERFACE DNNL::dnnl OpenMP::OpenMP_CXX)
    target_compile_definitions(nabla_dep_dnnl INTERFACE NABLA_WITH_DNNL=1)
    add_library(dep::dnnl ALIAS nabla_dep_dnnl)
  else()
    message(STATUS "oneDNN or OpenMP not found: conv2d/pool2d run im2col + GEMM (install libdnnl-dev)")
  endif()
endif()

# ONNX (Debian's libonnx-dev 1.12: the protobuf classes, the checker and
# shape inference) for onnx_io/, the importer and exporter. Its targets link
# protobuf::libprotobuf, which only find_package(Protobuf) defines.
find_package(Protobuf REQUIRED)
find_package(ONNX 1.12 REQUIRED CONFIG)
add_library(nabla_dep_onnx INTERFACE)
target_link_libraries(nabla_dep_onnx INTERFACE onnx onnx_proto protobuf::libprotobuf)
add_library(dep::onnx ALIAS nabla_dep_onnx)
