# The Python package (python/strata), installed beside the library: into the prefix's
# site-packages as the Python found here lays it out (Debian: lib/python3/dist-packages,
# elsewhere lib/pythonX.Y/site-packages), or STRATA_PYTHON_INSTALL_DIR (relative to the
# prefix). A generated strata/_installed.py tells the package where, from itself, the
# installed libstrata is, so that it loads that one before the dynamic loader's.
# The Python the package is for, and its tests run under: STRATA_PYTHON, else the first
# python3 that imports numpy (a version manager's python3 may come first on PATH without
# the distribution's packages), else the first python3.
set(STRATA_PYTHON "" CACHE FILEPATH
    "Python of the Python package, its tests and its install (empty: the first python3 that imports numpy)")
set(strata_python ${STRATA_PYTHON})
if(NOT strata_python)
    find_program(strata_python3_on_path NAMES python3)
    foreach(candidate ${strata_python3_on_path} /usr/bin/python3)
        if(NOT strata_python AND EXISTS ${candidate})
            execute_process(COMMAND ${candidate} -c "import numpy" RESULT_VARIABLE no_numpy
                            OUTPUT_QUIET ERROR_QUIET)
            if(no_numpy EQUAL 0)
                set(strata_python ${candidate})
            endif()
        endif()
    endforeach()
    if(NOT strata_python)
        set(strata_python ${strata_python3_on_path})
    endif()
endif()

set(strata_python_dir_default "")
if(strata_python)
    # The prefix's entry of site.getsitepackages that the interpreter would search for a
    # /usr or /usr/local install, made relative to the prefix.
    execute_process(
        COMMAND ${strata_python} -c
                "import site, sys\nd = site.getsitepackages(['/P'])\nwant = ['/P/lib/python3/dist-packages', '/P/lib/python%d.%d/site-packages' % sys.version_info[:2]]\nprint(next((w for w in want if w in d), d[-1])[3:])"
        OUTPUT_VARIABLE strata_python_dir_default OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE strata_python_rc ERROR_QUIET)
    if(NOT strata_python_rc EQUAL 0)
        set(strata_python_dir_default "")
    endif()
endif()
if(NOT strata_python_dir_default)
    set(strata_python_dir_default ${CMAKE_INSTALL_LIBDIR}/python3/site-packages)
endif()
set(STRATA_PYTHON_INSTALL_DIR ${strata_python_dir_default} CACHE STRING
    "Where cmake --install puts the Python package strata, under the prefix")

install(DIRECTORY python/strata DESTINATION ${STRATA_PYTHON_INSTALL_DIR}
        FILES_MATCHING PATTERN "*.py" PATTERN __pycache__ EXCLUDE)
file(RELATIVE_PATH strata_python_to_lib "/prefix/${STRATA_PYTHON_INSTALL_DIR}/strata"
     "/prefix/${CMAKE_INSTALL_LIBDIR}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/python/_installed.py
     "\"\"\"Written by cmake --install: where this package's libstrata is, from here.\"\"\"\n"
     "LIBRARY_DIR = \"${strata_python_to_lib}\"\n")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/python/_installed.py
        DESTINATION ${STRATA_PYTHON_INSTALL_DIR}/strata)
