# The Debian package, made in a build folder by `cpack -G DEB` after the build (scripts/check_deb.sh
# builds one and installs it in a clean Debian 12 root). It holds what cmake --install installs,
# under /usr, with its library dependencies from dpkg-shlibdeps (oneDNN, Google Benchmark, fmt,
# Open MPI, ...) and the Python packages the scripts import.
# The package is CPU-only: it is made from a build configured with -DTB_CUDA=OFF. The CUDA backend
# needs cuDNN, cuBLAS and NCCL for CUDA 13, which Debian 12 does not package: they come from
# NVIDIA's runfile or repositories, or PyPI's wheels, so dpkg-shlibdeps finds no package that
# provides them and a package depending on them could not name its dependencies. A site that
# runs on GPUs builds from source against its own CUDA (cmake --install, with
# -DTB_INSTALL_CUDA_RPATH where the libraries are not on the loader's path). cpack refuses a
# CUDA build (cmake/PackageCheck.cmake) rather than make a package whose dependencies are false.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME trainbench)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "trainbench")
set(CPACK_PACKAGE_CONTACT "trainbench maintainers <trainbench@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "deep-learning training benchmarks: CPU (oneDNN) and MPI data parallelism")
set(CPACK_PACKAGE_DESCRIPTION "trainbench trains four fixed models (an MLP, LeNet-5, an LSTM, ResNet-152) under a
Google Benchmark harness and writes every run as a CSV row with the machine it ran on. This
package is the CPU build (no CUDA backend), with the plotting and comparison scripts
(trainbench-plot, trainbench-compare), a Slurm batch template and a ReFrame check.")
# The prefix the install rules see is /usr (the sbatch template names /usr/bin/trainbench), the
# staging folder coming in through DESTDIR: with CPACK_SET_DESTDIR, CPack installs into
# CPACK_INSTALL_PREFIX (else CMAKE_INSTALL_PREFIX, /usr/local).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Beside what dpkg-shlibdeps finds: the scripts' Python (matplotlib for trainbench-plot, SciPy for
# trainbench-compare's U test).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3, python3-matplotlib, python3-numpy, python3-scipy")
# mpirun for mpi:N on one machine; Slurm's client for the sbatch template.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "openmpi-bin")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "slurm-client")
set(CPACK_TB_HAVE_CUDA ${TB_HAVE_CUDA})
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/PackageCheck.cmake)
include(CPack)
