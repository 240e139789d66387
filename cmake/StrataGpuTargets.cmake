# Which GPUs the kernels are built for. A GPU without code in the library cannot run the
# kernels ("no kernel image"), so the defaults cover the data-centre generations the
# installed compiler knows, and the device backends refuse a GPU the build does not cover.

# CUDA: Ampere (sm_80), Hopper (sm_90) and Blackwell (sm_100) machine code, plus the newest
# one's PTX, which the driver compiles for later GPUs. Set CMAKE_CUDA_ARCHITECTURES to
# choose otherwise.
function(strata_default_cuda_architectures)
    if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
        return()
    endif()
    set(nvcc ${CMAKE_CUDA_COMPILER})
    if(NOT nvcc)
        find_program(nvcc nvcc)
    endif()
    execute_process(COMMAND ${nvcc} --list-gpu-arch OUTPUT_VARIABLE known
                    RESULT_VARIABLE rc ERROR_QUIET)
    set(archs "")
    foreach(arch 80 90 100)
        if(rc EQUAL 0 AND known MATCHES "compute_${arch}\n")
            list(APPEND archs ${arch}-real)
        endif()
    endforeach()
    if(archs STREQUAL "")
        message(FATAL_ERROR "${nvcc} builds none of sm_80, sm_90, sm_100: "
                            "set CMAKE_CUDA_ARCHITECTURES")
    endif()
    list(POP_BACK archs newest)
    string(REPLACE "-real" "" newest_with_ptx ${newest})
    list(APPEND archs ${newest_with_ptx})
    set(CMAKE_CUDA_ARCHITECTURES "${archs}" CACHE STRING "CUDA architectures of the kernels")
    message(STATUS "CUDA kernels for ${archs}")
endfunction()

# HIP: the CDNA generations hipcc can target here: MI100 (gfx908), MI200 (gfx90a), MI300
# (gfx940 to gfx942) and MI350 (gfx950). Set STRATA_HIP_ARCHS to choose otherwise.
function(strata_default_hip_architectures)
    if(DEFINED STRATA_HIP_ARCHS AND NOT STRATA_HIP_ARCHS STREQUAL "")
        return()
    endif()
    set(archs "")
    foreach(arch gfx908 gfx90a gfx940 gfx941 gfx942 gfx950)
        execute_process(COMMAND ${STRATA_HIPCC} --offload-arch=${arch} --cuda-device-only -S
                                -x hip /dev/null -o /dev/null
                        RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
        if(rc EQUAL 0)
            list(APPEND archs ${arch})
        endif()
    endforeach()
    if(archs STREQUAL "")
        message(FATAL_ERROR "${STRATA_HIPCC} targets no CDNA GPU: set STRATA_HIP_ARCHS")
    endif()
    set(STRATA_HIP_ARCHS "${archs}" CACHE STRING "AMD GPU architectures of the HIP kernels")
    message(STATUS "HIP kernels for ${archs}")
endfunction()
