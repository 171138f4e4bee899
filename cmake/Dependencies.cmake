# Every dependency is a Debian package; a missing one stops the configure with the package to install.

macro(loom_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "Loom needs ${what}: install the Debian package '${package}' "
                        "(apt-get install -y ${package}).")
  endif()
endmacro()

find_package(Threads REQUIRED)

if(LOOM_WITH_MPI)
  find_package(MPI QUIET COMPONENTS CXX)
  loom_require(MPI_CXX_FOUND "MPI (OpenMPI; or configure with -DLOOM_WITH_MPI=OFF)" "libopenmpi-dev openmpi-bin")
endif()

find_package(nlohmann_json 3.2 QUIET)
loom_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")

find_package(ZLIB QUIET)
loom_require(ZLIB_FOUND "zlib (to read the gzipped IDX files Debian ships)" "zlib1g-dev")

# OpenBLAS, its pthreads build: Loom calls it single-threaded from the threads of its own pool
# (core/parallel.h). The OpenMP build, called at once from two threads that are not OpenMP's, ran
# at half the rate of one thread (a shared buffer's lock); the pthreads build runs them side by side.
find_path(LOOM_OPENBLASP_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas-pthread
  NO_DEFAULT_PATH)
find_library(LOOM_OPENBLASP_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/openblas-pthread
  NO_DEFAULT_PATH)
if(NOT LOOM_OPENBLASP_INCLUDE OR NOT LOOM_OPENBLASP_LIB)
  set(_ob_found OFF)
else()
  set(_ob_found ON)
endif()
loom_require(_ob_found "the pthreads build of OpenBLAS" "libopenblas-pthread-dev")
# LAPACK's routines are in that OpenBLAS library; lapack.h (liblapacke-dev, reference LAPACK's
# header) declares them, so that ops/lapack.cpp states no prototype by hand.
find_path(LOOM_LAPACK_INCLUDE lapack.h)
if(LOOM_LAPACK_INCLUDE)
  set(_lapack_found ON)
else()
  set(_lapack_found OFF)
endif()
loom_require(_lapack_found "LAPACK's C header lapack.h" "liblapacke-dev")
add_library(loom_openblas INTERFACE)
target_include_directories(loom_openblas INTERFACE ${LOOM_OPENBLASP_INCLUDE} ${LOOM_LAPACK_INCLUDE})
target_link_libraries(loom_openblas INTERFACE ${LOOM_OPENBLASP_LIB})

# oneDNN (libdnnl-dev): the GEMM seam's backend for bfloat16 and float16 products on the CPU's bf16 /
# fp16 / AMX instructions (kernels/gemm_dnnl.cpp). Found by path: Debian's CMake package of it also
# looks for OpenCL, which Loom does not use.
find_path(LOOM_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
find_library(LOOM_DNNL_LIB NAMES dnnl)
if(LOOM_DNNL_INCLUDE AND LOOM_DNNL_LIB)
  set(_dnnl_found ON)
else()
  set(_dnnl_found OFF)
endif()
loom_require(_dnnl_found "oneDNN" "libdnnl-dev")
add_library(loom_dnnl INTERFACE)
target_include_directories(loom_dnnl INTERFACE ${LOOM_DNNL_INCLUDE})
target_link_libraries(loom_dnnl INTERFACE ${LOOM_DNNL_LIB} ${CMAKE_DL_LIBS})

if(LOOM_BUILD_TESTS)
  find_package(GTest QUIET)
  loom_require(GTest_FOUND "GoogleTest" "libgtest-dev")
endif()
if(LOOM_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  loom_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")
endif()
