# What `cmake --install` puts under the prefix besides the tools (GNUInstallDirs):
#   lib/libstrata.so.0, lib/libstrata.a     strata::strata, strata::strata_static
#   include/strata/strata.h
#   lib/cmake/strata/strataConfig*.cmake   find_package(strata)
#   lib/pkgconfig/strata.pc                 pkg-config strata (--static for libstrata.a)
#   share/man/man1/strata-*.1, share/doc/strata/ (README.md, LICENSE, docs/*.md)
# tests/packaging installs into a temporary prefix and builds a program against each.
include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata CACHE STRING
    "Where strataConfig.cmake is installed, under the prefix")

# strata_add_installed_archive(<target> LAYERS <layer>...): libstrata.a as <target>, the
# layers' objects linked into one relocatable object (ld -r) whose only global symbols are
# the strata_* functions: every other one, internal to the library (topo_, inter_, the
# CUDA/HIP launchers, ...), is made local by objcopy, as libstrata.map does for the shared
# library. Hidden symbols go too (a strata_* one that is not STRATA_API), and COMDAT groups
# are dissolved: where a consumer's objects hold the same group (C++ and CUDA code's
# DW.ref.__gxx_personality_v0), the linker would keep theirs and drop ours, to which our now
# local symbols still point. Archives the layers build themselves (hipcc's kernels) go in
# whole. The target's link interface is what the layers link, which the installed package
# recreates for consumers (strataConfig.cmake, strata.pc); sets STRATA_STATIC_* in the
# caller's scope for strata_install_package().
function(strata_add_installed_archive target)
    cmake_parse_arguments(ARG "" "" "LAYERS" ${ARGN})
    set(objects "")
    set(archives "")
    set(link "")
    set(pkg_prefixes "")
    set(pc_libs "")
    set(need_threads FALSE)
    set(need_cuda FALSE)
    set(need_cxx FALSE)
    foreach(layer ${ARG_LAYERS})
        list(APPEND objects $<TARGET_OBJECTS:${layer}>)
        get_target_property(sources ${layer} SOURCES)
        if(sources MATCHES "\\.(cu|cpp|cc|cxx|hip)(;|$)")
            set(need_cxx TRUE)
        endif()
        get_target_property(libs ${layer} INTERFACE_LINK_LIBRARIES)
        if(NOT libs)
            continue()
        endif()
        foreach(lib ${libs})
            string(FIND "${lib}" "${PROJECT_BINARY_DIR}/" in_build)
            if(lib MATCHES "^PkgConfig::(.+)$")
                set(prefix ${CMAKE_MATCH_1})
                if(NOT DEFINED STRATA_PKG_${prefix})
                    message(FATAL_ERROR "${layer} links ${lib}: set STRATA_PKG_${prefix} to its "
                                        "pkg-config module (cmake/StrataDeps.cmake) so that "
                                        "the installed package can find it for consumers")
                endif()
                list(APPEND link ${lib})
                list(APPEND pkg_prefixes ${prefix})
                foreach(dir ${${prefix}_LIBRARY_DIRS})
                    if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
                        list(APPEND pc_libs -L${dir})
                    endif()
                endforeach()
                list(TRANSFORM ${prefix}_LIBRARIES PREPEND -l OUTPUT_VARIABLE flags)
                list(APPEND pc_libs ${flags} ${${prefix}_LDFLAGS_OTHER})
            elseif(lib STREQUAL "Threads::Threads")
                list(APPEND link ${lib})
                set(need_threads TRUE)
                if(CMAKE_THREAD_LIBS_INIT)
                    list(APPEND pc_libs ${CMAKE_THREAD_LIBS_INIT})
                endif()
            elseif(lib MATCHES "^CUDA::(.+)$")
                list(APPEND link ${lib})
                set(need_cuda TRUE)
                set(name ${CMAKE_MATCH_1})
                if(name STREQUAL "cuda_driver")
                    set(name cuda)
                endif()
                list(APPEND pc_libs -L${CUDAToolkit_LIBRARY_DIR} -l${name})
            elseif(in_build EQUAL 0 AND lib MATCHES "\\.a$")
                list(APPEND archives ${lib})
            elseif(IS_ABSOLUTE "${lib}" AND lib MATCHES "/lib([^/]+)\\.(so|a)$")
                list(APPEND link ${lib}) # e.g. libamdhip64.so, found at configure time
                get_filename_component(dir ${lib} DIRECTORY)
                if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
                    list(APPEND pc_libs -L${dir})
                endif()
                list(APPEND pc_libs -l${CMAKE_MATCH_1})
            elseif(lib MATCHES "^[A-Za-z0-9_.+-]+$" AND NOT TARGET ${lib})
                list(APPEND link ${lib}) # m, dl
                list(APPEND pc_libs -l${lib})
            else()
                message(FATAL_ERROR "${layer} links ${lib}: the installed libstrata.a does not "
                                    "know how its consumers would link it "
                                    "(cmake/StrataPackage.cmake)")
            endif()
        endforeach()
    endforeach()
    # Kernels' host code is C++ (nvcc's and hipcc's host compilers): a C program linking the
    # archive needs the C++ runtime (__gxx_personality_v0, __cxa_guard_*), libstdc++ here.
    if(need_cxx OR archives)
        list(APPEND link stdc++)
        list(APPEND pc_libs -lstdc++)
    endif()
    list(REMOVE_DUPLICATES link)
    list(REMOVE_DUPLICATES pkg_prefixes)
    list(REMOVE_DUPLICATES pc_libs)

    if(NOT CMAKE_LINKER OR NOT CMAKE_OBJCOPY)
        message(FATAL_ERROR "libstrata.a is made with a linker (ld -r) and objcopy: set "
                            "CMAKE_LINKER and CMAKE_OBJCOPY (binutils or LLVM's)")
    endif()
    set(whole "")
    if(archives)
        set(whole --whole-archive ${archives} --no-whole-archive)
    endif()
    set(all ${CMAKE_CURRENT_BINARY_DIR}/${target}_layers.o)
    set(public ${CMAKE_CURRENT_BINARY_DIR}/${target}_public.o)
    add_custom_command(
        OUTPUT ${public}
        COMMAND ${CMAKE_LINKER} -r -o ${all} ${objects} ${whole}
        COMMAND ${CMAKE_OBJCOPY} --localize-hidden --wildcard --keep-global-symbol=strata_*
                --remove-section=.group ${all} ${public}
        DEPENDS ${objects} ${archives} ${ARG_LAYERS}
        COMMENT "Linking the layers into one object for libstrata.a (only strata_* global)"
        COMMAND_EXPAND_LISTS VERBATIM)
    set_source_files_properties(${public} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
    add_library(${target} STATIC ${public})
    set_target_properties(${target} PROPERTIES LINKER_LANGUAGE C)
    target_link_libraries(${target} INTERFACE ${link})
    add_dependencies(${target} ${ARG_LAYERS})

    set(STRATA_STATIC_PKG_PREFIXES ${pkg_prefixes} PARENT_SCOPE)
    set(STRATA_STATIC_NEED_THREADS ${need_threads} PARENT_SCOPE)
    set(STRATA_STATIC_NEED_CUDA ${need_cuda} PARENT_SCOPE)
    string(REPLACE ";" " " pc_libs "${pc_libs}")
    set(STRATA_STATIC_PC_LIBS "${pc_libs}" PARENT_SCOPE)
endfunction()

# strata_install_package(SHARED <target> STATIC <target>): installs both libraries as
# strata::strata and strata::strata_static with strataConfig.cmake, strataConfigVersion.cmake
# and strata.pc, from what strata_add_installed_archive() found.
function(strata_install_package)
    cmake_parse_arguments(ARG "" "SHARED;STATIC" "" ${ARGN})
    set_target_properties(${ARG_SHARED} PROPERTIES EXPORT_NAME strata)
    set_target_properties(${ARG_STATIC} PROPERTIES EXPORT_NAME strata_static)
    install(TARGETS ${ARG_SHARED} EXPORT strataTargets
            LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
            RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
            INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    install(TARGETS ${ARG_STATIC} EXPORT strataStaticTargets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
            INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
    install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_INSTALL_CMAKEDIR})
    install(EXPORT strataStaticTargets NAMESPACE strata::
            DESTINATION ${STRATA_INSTALL_CMAKEDIR})

    # What strataConfig.cmake looks up before it defines strata::strata_static.
    set(deps "")
    if(STRATA_STATIC_NEED_THREADS)
        string(APPEND deps "_strata_static_dependency(Threads)\n")
    endif()
    if(STRATA_STATIC_NEED_CUDA)
        string(APPEND deps "_strata_static_dependency(CUDAToolkit)\n")
    endif()
    foreach(prefix ${STRATA_STATIC_PKG_PREFIXES})
        string(APPEND deps "_strata_static_pkg(${prefix} \"${STRATA_PKG_${prefix}}\")\n")
    endforeach()
    set(STRATA_CONFIG_STATIC_DEPS "${deps}")
    configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
                                  ${PROJECT_BINARY_DIR}/strataConfig.cmake
                                  INSTALL_DESTINATION ${STRATA_INSTALL_CMAKEDIR})
    # 0.x: every 0.y.z is libstrata.so.0, the same ABI (api/libstrata.map).
    write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
                                     COMPATIBILITY SameMajorVersion)
    install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake
                  ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
            DESTINATION ${STRATA_INSTALL_CMAKEDIR})

    # strata.pc: relative to its own folder (pcfiledir), so that a prefix moved whole, or
    # installed with DESTDIR, still works. Libs.private: what libstrata.a calls, in the shared
    # libraries of its dependencies (their -dev packages' .so).
    file(RELATIVE_PATH to_prefix ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
    file(RELATIVE_PATH libdir ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_LIBDIR})
    file(RELATIVE_PATH includedir ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_INCLUDEDIR})
    string(REGEX REPLACE "/$" "" to_prefix "${to_prefix}")
    set(STRATA_PC_PREFIX "\${pcfiledir}/${to_prefix}")
    set(STRATA_PC_LIBDIR "\${prefix}/${libdir}")
    set(STRATA_PC_INCLUDEDIR "\${prefix}/${includedir}")
    # The pkg-config modules behind those libraries, named in a comment only: as
    # Requires.private, `pkg-config --static` would add what linking *their* static archives
    # takes (hwloc's -ludev, libfabric's -lpsm2 -lrdmacm, ...), which their Debian -dev
    # packages do not install, and libstrata.a links their shared libraries.
    set(modules "")
    foreach(prefix ${STRATA_STATIC_PKG_PREFIXES})
        list(APPEND modules "${STRATA_PKG_${prefix}}")
    endforeach()
    string(REPLACE ";" " " STRATA_PC_MODULES "${modules}")
    configure_file(${PROJECT_SOURCE_DIR}/cmake/strata.pc.in ${PROJECT_BINARY_DIR}/strata.pc
                   @ONLY)
    install(FILES ${PROJECT_BINARY_DIR}/strata.pc
            DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
