# Read by cpack (CPACK_PROJECT_CONFIG_FILE, cmake/Package.cmake) before it makes a package: the
# Debian package is CPU-only (Package.cmake says why), so a build with the CUDA backend is refused.
if(CPACK_GENERATOR STREQUAL "DEB" AND CPACK_TB_HAVE_CUDA)
  message(FATAL_ERROR "trainbench: this build has the CUDA backend, and the Debian package is CPU-only (Debian 12 "
                      "packages no cuDNN or NCCL for CUDA 13: cmake/Package.cmake). Package a build configured "
                      "with -DTB_CUDA=OFF (scripts/check_deb.sh does), or install this one with cmake --install")
endif()
