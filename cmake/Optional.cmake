# Detects the optional dependencies: the CUDA toolkit with cuDNN, cuBLAS and NCCL, and MPI.
# Sets TB_HAVE_CUDA and TB_HAVE_MPI, and enables the CUDA language when the backend is built.
set(TB_HAVE_CUDA OFF)
option(TB_REQUIRE_CUDA "Fail the configuration unless the CUDA backend can be built (CI)" OFF)
# A toolkit root holding cuDNN and NCCL too, laid out like /usr/local/cuda: scripts/deps.sh exports
# it (build/cuda-wheels/toolkit, from PyPI's NVIDIA wheels) where a driver but no toolkit is found.
set(TB_CUDA_ROOT "$ENV{TB_CUDA_ROOT}" CACHE PATH "CUDA toolkit root with cuDNN and NCCL (default: where NVIDIA installs them)")
if(NOT TB_CUDA_ROOT AND NOT "$ENV{TB_CUDA_ROOT}" STREQUAL "")
  set(TB_CUDA_ROOT "$ENV{TB_CUDA_ROOT}" CACHE PATH "CUDA toolkit root with cuDNN and NCCL" FORCE)
endif()
if(TB_CUDA)
  if(TB_CUDA_ROOT)
    set(CMAKE_CUDA_COMPILER ${TB_CUDA_ROOT}/bin/nvcc)
    set(CUDAToolkit_ROOT ${TB_CUDA_ROOT})
  # The toolkit's standard location, for shells whose PATH lacks /usr/local/cuda/bin.
  elseif(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  # Debian 12's CMake 3.25.1 marks CUDA::nvToolsExt deprecated without checking that it exists, and
  # fails where the toolkit has no libnvToolsExt (CUDA 13); it does so only for projects requiring
  # 3.25, so the search runs as if this one required less (policies stay those of 3.25).
  if(CMAKE_VERSION VERSION_LESS 3.25.2)
    set(TB_MINIMUM_REQUIRED ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit QUIET)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${TB_MINIMUM_REQUIRED})
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  find_path(TB_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/cuda/include)
  find_library(TB_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64)
  find_path(TB_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/cuda/include)
  find_library(TB_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TB_CUDNN_INCLUDE AND TB_CUDNN_LIB AND TB_NCCL_INCLUDE AND TB_NCCL_LIB)
    set(TB_HAVE_CUDA ON)
    # A100 and H100/H200 unless the user names others: the GPUs the suite is measured on.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # nvcc's C++17: the newest standard CMake 3.25 knows for CUDA. Host code stays C++20.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    message(STATUS "trainbench: CUDA ${CUDAToolkit_VERSION}, cuDNN ${TB_CUDNN_LIB}, NCCL ${TB_NCCL_LIB}")
  else()
    message(STATUS "trainbench: CUDA backend not built (toolkit ${CUDAToolkit_FOUND}, nvcc '${CMAKE_CUDA_COMPILER}', cuDNN '${TB_CUDNN_LIB}', NCCL '${TB_NCCL_LIB}')")
  endif()
endif()

if(TB_REQUIRE_CUDA AND NOT TB_HAVE_CUDA)
  message(FATAL_ERROR "TB_REQUIRE_CUDA is on but the CUDA backend cannot be built (see the line above): install "
                      "the CUDA toolkit with cuDNN and NCCL, or configure with -DTB_REQUIRE_CUDA=OFF")
endif()

option(TB_REQUIRE_MPI "Fail the configuration unless MPI support can be built (CI)" OFF)
set(TB_HAVE_MPI OFF)
if(TB_MPI)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TB_HAVE_MPI ON)
  endif()
endif()
if(TB_REQUIRE_MPI AND NOT TB_HAVE_MPI)
  message(FATAL_ERROR "TB_REQUIRE_MPI is on but CMake found no MPI for C++: install libopenmpi-dev openmpi-bin "
                      "(scripts/deps.sh does), or configure with -DTB_REQUIRE_MPI=OFF")
endif()
