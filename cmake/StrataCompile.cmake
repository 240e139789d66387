# Warnings, sanitizers and the helper that declares a layer.
# C only: nvcc compiles the .cu kernels with its own options.
add_compile_options("$<$<COMPILE_LANGUAGE:C>:-Wall;-Wextra;-Wshadow;-Wstrict-prototypes>"
                    "$<$<COMPILE_LANGUAGE:C>:-Wmissing-prototypes;-Wno-unused-parameter>"
                    "$<$<COMPILE_LANGUAGE:C>:-Werror=implicit-function-declaration>"
                    "$<$<COMPILE_LANGUAGE:C>:-Werror=incompatible-pointer-types>")
add_compile_definitions(_GNU_SOURCE)

if(STRATA_SANITIZE STREQUAL "address")
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                        -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
elseif(STRATA_SANITIZE STREQUAL "thread")
    add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
    add_link_options(-fsanitize=thread)
elseif(NOT STRATA_SANITIZE STREQUAL "")
    message(FATAL_ERROR "STRATA_SANITIZE must be address, thread or empty, not '${STRATA_SANITIZE}'")
endif()

# The fuzz build: every object instrumented for libFuzzer's coverage and ASan+UBSan; the
# fuzz targets alone link libFuzzer's main (tests/fuzz/CMakeLists.txt).
if(STRATA_BUILD_FUZZ)
    if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
        message(FATAL_ERROR "STRATA_BUILD_FUZZ needs clang (CC=clang), not ${CMAKE_C_COMPILER_ID}")
    endif()
    if(NOT STRATA_SANITIZE STREQUAL "")
        message(FATAL_ERROR "STRATA_BUILD_FUZZ brings its own sanitizers: leave STRATA_SANITIZE empty")
    endif()
    add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                        -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
endif()

# strata_add_layer(<name> SOURCES ... [LIBS ...]): object library strata_<name> whose
# objects go into libstrata; layers see the repository root and the public headers.
set_property(GLOBAL PROPERTY STRATA_LAYERS "")
function(strata_add_layer name)
    cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
    add_library(strata_${name} OBJECT ${ARG_SOURCES})
    target_include_directories(strata_${name} PUBLIC ${PROJECT_SOURCE_DIR}
                               ${PROJECT_SOURCE_DIR}/api/include)
    target_compile_definitions(strata_${name} PRIVATE STRATA_BUILDING_LIBRARY)
    target_link_libraries(strata_${name} PUBLIC ${ARG_LIBS})
    set_property(GLOBAL APPEND PROPERTY STRATA_LAYERS strata_${name})
endfunction()
