# Third-party libraries strata builds against (Debian packages: scripts/setup.sh installs them).
include(${CMAKE_CURRENT_LIST_DIR}/StrataGpuTargets.cmake)

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

# STRATA_PKG_<PREFIX>: the pkg-config module (and version) behind PkgConfig::<PREFIX>; the
# installed strataConfig.cmake finds the same for libstrata.a's consumers (StrataPackage.cmake).
set(STRATA_PKG_HWLOC     "hwloc>=2.0")
set(STRATA_PKG_LIBXML2   "libxml-2.0")
set(STRATA_PKG_JANSSON   "jansson>=2.11") # json_pack "o" frees on error
set(STRATA_PKG_LIBFABRIC "libfabric>=1.9")
set(STRATA_PKG_IBVERBS   "libibverbs")
set(STRATA_PKG_UCX       "ucx>=1.11")    # ucp_*_nbx, AM handlers with reply_ep
pkg_check_modules(HWLOC   REQUIRED IMPORTED_TARGET ${STRATA_PKG_HWLOC})
pkg_check_modules(LIBXML2 REQUIRED IMPORTED_TARGET ${STRATA_PKG_LIBXML2})
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET ${STRATA_PKG_JANSSON})
pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET ${STRATA_PKG_LIBFABRIC})

if(STRATA_BUILD_TESTS)
    pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()
# The verbs transport: built wherever libibverbs is found unless STRATA_WITH_VERBS is set;
# asked for (ON) and absent is an error, not a silent omission.
if(NOT DEFINED STRATA_WITH_VERBS)
    pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET ${STRATA_PKG_IBVERBS})
    if(IBVERBS_FOUND)
        set(STRATA_WITH_VERBS ON)
    else()
        set(STRATA_WITH_VERBS OFF)
        message(STATUS "libibverbs not found: the verbs transport is not built "
                       "(apt-get install libibverbs-dev)")
    endif()
elseif(STRATA_WITH_VERBS)
    pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET ${STRATA_PKG_IBVERBS})
    if(NOT IBVERBS_FOUND)
        message(FATAL_ERROR "STRATA_WITH_VERBS=ON, but libibverbs was not found "
                            "(apt-get install libibverbs-dev, or -DSTRATA_WITH_VERBS=OFF)")
    endif()
endif()
# The UCX transport, the same way: built wherever UCX 1.11+ (ucp_*_nbx, AM handlers with
# reply_ep) is found unless STRATA_WITH_UCX is set; ON and absent is an error.
if(NOT DEFINED STRATA_WITH_UCX)
    pkg_check_modules(UCX QUIET IMPORTED_TARGET ${STRATA_PKG_UCX})
    if(UCX_FOUND)
        set(STRATA_WITH_UCX ON)
    else()
        set(STRATA_WITH_UCX OFF)
        message(STATUS "UCX 1.11+ not found: the ucx transport is not built "
                       "(apt-get install libucx-dev)")
    endif()
elseif(STRATA_WITH_UCX)
    pkg_check_modules(UCX QUIET IMPORTED_TARGET ${STRATA_PKG_UCX})
    if(NOT UCX_FOUND)
        message(FATAL_ERROR "STRATA_WITH_UCX=ON, but UCX 1.11 or later was not found by "
                            "pkg-config (module 'ucx'; Debian: apt-get install libucx-dev, "
                            "or -DSTRATA_WITH_UCX=OFF)")
    endif()
endif()
# The MPI subcommands of strata-bench (intra and moe compare with MPI_Alltoallv): built
# wherever MPI is found unless STRATA_WITH_MPI_BENCH is set; ON without MPI is an error.
if(NOT DEFINED STRATA_WITH_MPI_BENCH)
    find_package(MPI QUIET COMPONENTS C)
    if(MPI_C_FOUND)
        set(STRATA_WITH_MPI_BENCH ON)
    else()
        set(STRATA_WITH_MPI_BENCH OFF)
        message(STATUS "MPI not found: strata-bench is built without its intra and moe "
                       "subcommands (apt-get install libopenmpi-dev)")
    endif()
elseif(STRATA_WITH_MPI_BENCH)
    find_package(MPI QUIET COMPONENTS C)
    if(NOT MPI_C_FOUND)
        message(FATAL_ERROR "STRATA_WITH_MPI_BENCH=ON, but no MPI C library was found "
                            "(apt-get install libopenmpi-dev, set MPI_HOME or MPI_C_COMPILER, "
                            "or -DSTRATA_WITH_MPI_BENCH=OFF)")
    endif()
endif()
if(STRATA_WITH_CUDA)
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
        set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    strata_default_cuda_architectures()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
endif()
if(STRATA_WITH_HIP)
    find_program(STRATA_HIPCC hipcc REQUIRED)
    find_library(STRATA_AMDHIP64 amdhip64 REQUIRED)
    strata_default_hip_architectures()
endif()
