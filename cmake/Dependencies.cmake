# Every dependency is a Debian package; a missing one stops the configure with the package to install.

macro(loom_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "Loom needs ${what}: install the Debian package '${package}' "
                        "(apt-get install -y ${package}).")
  endif()
endmacro()

find_package(OpenMP QUIET)
loom_require(OpenMP_CXX_FOUND "OpenMP" "libgomp1 (comes with g++)")

if(LOOM_WITH_MPI)
  find_package(MPI QUIET COMPONENTS CXX)
  loom_require(MPI_CXX_FOUND "MPI (OpenMPI; or configure with -DLOOM_WITH_MPI=OFF)" "libopenmpi-dev openmpi-bin")
endif()

find_package(nlohmann_json 3.2 QUIET)
loom_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")

find_package(ZLIB QUIET)
loom_require(ZLIB_FOUND "zlib (to read the gzipped IDX files Debian ships)" "zlib1g-dev")

# OpenBLAS: the OpenMP build, so that our kernels and GEMM share one OpenMP runtime and one pool.
find_path(LOOM_OPENBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/openblas-openmp
  NO_DEFAULT_PATH)
find_library(LOOM_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT LOOM_OPENBLAS_INCLUDE OR NOT LOOM_OPENBLAS_LIB)
  set(_ob_found OFF)
else()
  set(_ob_found ON)
endif()
loom_require(_ob_found "the OpenMP build of OpenBLAS" "libopenblas-openmp-dev")
add_library(loom_openblas INTERFACE)
target_include_directories(loom_openblas INTERFACE ${LOOM_OPENBLAS_INCLUDE})
target_link_libraries(loom_openblas INTERFACE ${LOOM_OPENBLAS_LIB})

if(LOOM_BUILD_TESTS)
  find_package(GTest QUIET)
  loom_require(GTest_FOUND "GoogleTest" "libgtest-dev")
endif()
if(LOOM_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  loom_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")
endif()
