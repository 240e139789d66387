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

# The layer rule, enforced: a layer's files find only its own headers, those of the layers
# it names as BELOW, and the public headers (util: strata/types.h alone). Each layer gets a
# folder in the build tree holding links to just those folders, and that folder, not the
# repository root, is its include path: an upward include, or one across to a sibling, is
# "No such file or directory". tests/layers checks that it is.
function(strata_stage_layer_includes name folder)
    cmake_parse_arguments(ARG "" "" "BELOW" ${ARGN})
    set(dir ${PROJECT_BINARY_DIR}/layers/${name})
    file(REMOVE_RECURSE ${dir})
    file(MAKE_DIRECTORY ${dir})
    set(folders ${folder} ${ARG_BELOW})
    list(REMOVE_DUPLICATES folders)
    foreach(layer ${folders})
        if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
            message(FATAL_ERROR "layer ${name}: no layer '${layer}' below it")
        endif()
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${layer} ${dir}/${layer} SYMBOLIC)
    endforeach()
    if(name STREQUAL "util")
        file(MAKE_DIRECTORY ${dir}/strata)
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/api/include/strata/types.h ${dir}/strata/types.h
             SYMBOLIC)
    else()
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/api/include/strata ${dir}/strata SYMBOLIC)
    endif()
    set_property(GLOBAL PROPERTY STRATA_LAYER_INCLUDES_${name} ${dir})
endfunction()

# strata_use_layer_includes(<target> <layer>): compile target's sources as files of layer.
function(strata_use_layer_includes target layer)
    get_property(dir GLOBAL PROPERTY STRATA_LAYER_INCLUDES_${layer})
    if(NOT dir)
        message(FATAL_ERROR "${target}: layer '${layer}' is not declared yet")
    endif()
    target_include_directories(${target} PRIVATE ${dir})
endfunction()

# strata_add_layer(<name> [FOLDER folder] SOURCES ... [BELOW folder...] [LIBS ...]): object
# library strata_<name> whose objects go into libstrata, its sources in FOLDER (default:
# <name>). BELOW lists every folder whose headers it may include, those its headers include
# included (the rule is not transitive by itself).
set_property(GLOBAL PROPERTY STRATA_LAYERS "")
function(strata_add_layer name)
    cmake_parse_arguments(ARG "" "FOLDER" "SOURCES;BELOW;LIBS" ${ARGN})
    if(NOT ARG_FOLDER)
        set(ARG_FOLDER ${name})
    endif()
    add_library(strata_${name} OBJECT ${ARG_SOURCES})
    strata_stage_layer_includes(${name} ${ARG_FOLDER} BELOW ${ARG_BELOW})
    strata_use_layer_includes(strata_${name} ${name})
    target_compile_definitions(strata_${name} PRIVATE STRATA_BUILDING_LIBRARY)
    target_link_libraries(strata_${name} PUBLIC ${ARG_LIBS})
    set_property(GLOBAL APPEND PROPERTY STRATA_LAYERS strata_${name})
endfunction()
