#!/usr/bin/env bash
# The installed package: `cmake --install` into a temporary prefix, what it put there, the
# global symbols of libstrata.a (strata_* only, the same as libstrata.so exports), then a
# program built against it four ways and run: CMake find_package(strata) with strata::strata
# and strata::strata_static, pkg-config strata and pkg-config --static strata. The prefix is
# removed however the script ends.
# The Python package goes beside the library, and loads that library with no variable set;
# pip installs it offline from python/ (pyproject.toml).
# Usage: test_packaging.sh BUILD_DIR CONSUMER_SOURCE_DIR CMAKE CC NM "CONSUMER_FLAGS"
#        "SKIP_REASON" LIBDIR INCLUDEDIR BINDIR MANDIR DOCDIR PYTHON PYTHONDIR SOURCE_DIR
# CONSUMER_FLAGS: compiler and linker flags a program needs to link this build's libstrata
# (the sanitizer's); a non-empty SKIP_REASON leaves the consumers out (a "SKIP:" line).
# The *DIR arguments are the build's CMAKE_INSTALL_*DIR.
set -u
build=$1 consumer=$2 cmake=$3 cc=$4 nm=$5 flags=$6 skip_reason=$7
libdir_rel=$8 includedir_rel=$9 bindir_rel=${10} mandir_rel=${11} docdir_rel=${12}
python=${13} pythondir_rel=${14} source=${15}
step_timeout=120
passed=0

fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "ok: $*"; passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-packaging.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

# Install into $tmp/prefix; a build that set an absolute CMAKE_INSTALL_*DIR installs there
# whatever --prefix says, so it is installed under DESTDIR=$tmp/root instead.
prefix=$tmp/prefix
destdir=""
for dir in "$libdir_rel" "$includedir_rel" "$bindir_rel" "$mandir_rel" "$docdir_rel" \
           "$pythondir_rel"; do
    case $dir in /*) destdir=$tmp/root ;; esac
done
if [ -n "$destdir" ]; then
    prefix=$destdir$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
    out=$(DESTDIR=$destdir timeout $step_timeout "$cmake" --install "$build" 2>&1) ||
        fail "cmake --install (DESTDIR=$destdir): $out"
else
    out=$(timeout $step_timeout "$cmake" --install "$build" --prefix "$prefix" 2>&1) ||
        fail "cmake --install --prefix $prefix: $out"
fi
under() { case $1 in /*) echo "${destdir}$1" ;; *) echo "$prefix/$1" ;; esac; }
libdir=$(under "$libdir_rel")
includedir=$(under "$includedir_rel")
bindir=$(under "$bindir_rel")
mandir=$(under "$mandir_rel")
docdir=$(under "$docdir_rel")
pythondir=$(under "$pythondir_rel")

# --- What the prefix holds ---------------------------------------------------------------
for f in "$libdir/libstrata.so.0" "$libdir/libstrata.a" "$includedir/strata/strata.h" \
         "$libdir/cmake/strata/strataConfig.cmake" \
         "$libdir/cmake/strata/strataConfigVersion.cmake" \
         "$libdir/cmake/strata/strataTargets.cmake" \
         "$libdir/cmake/strata/strataStaticTargets.cmake" \
         "$libdir/pkgconfig/strata.pc" "$docdir/LICENSE" "$docdir/README.md" \
         "$docdir/moe.md"; do
    [ -f "$f" ] || fail "not installed: ${f#"$tmp"/}"
done
for tool in strata-topo strata-info strata-run strata-bench strata-tune; do
    [ -x "$bindir/$tool" ] || fail "not installed: $bindir_rel/$tool"
    page=$mandir/man1/$tool.1
    [ -f "$page" ] || fail "no man page: $mandir_rel/man1/$tool.1"
    grep -q "^\.TH ${tool^^} 1" "$page" || fail "$tool.1 has no .TH ${tool^^} 1 line"
    if command -v groff >/dev/null 2>&1; then
        warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
        [ -z "$warnings" ] || fail "groff warns about $tool.1: $warnings"
    fi
done
pass "installed: libraries, header, CMake package, strata.pc, tools, man pages, docs"

# --- libstrata.a: strata_* alone, as libstrata.so -------------------------------------------
archive_syms=$("$nm" -g --defined-only "$libdir/libstrata.a" | awk 'NF == 3 { print $3 }' | sort)
shared_syms=$("$nm" -D --defined-only "$libdir/libstrata.so.0" |
              awk 'NF == 3 { sub(/@.*/, "", $3); print $3 }' | grep -vx 'STRATA_[0-9.]*' | sort)
others=$(grep -v '^strata_' <<<"$archive_syms" | head -20)
[ -z "$others" ] || fail "libstrata.a has global symbols other than strata_*: $others"
grep -q '^strata_get_version$' <<<"$archive_syms" || fail "libstrata.a: no strata_get_version"
[ "$archive_syms" = "$shared_syms" ] ||
    fail "libstrata.a and libstrata.so define different symbols: " \
         "$(diff <(echo "$archive_syms") <(echo "$shared_syms") | grep '^[<>]' | head -10)"
pass "libstrata.a: $(wc -l <<<"$archive_syms") global symbols, all strata_*, as libstrata.so"

# --- The Python package ----------------------------------------------------------------------
for f in __init__.py _library.py moe.py comm.py _installed.py; do
    [ -f "$pythondir/strata/$f" ] || fail "not installed: ${pythondir_rel}/strata/$f"
done
if [ -n "$skip_reason" ]; then
    echo "Python package not loaded: $skip_reason"
elif [ -n "$flags" ]; then
    echo "Python package not loaded: an instrumented libstrata ($flags) loads only into a program built with it"
elif ! "$python" -c "import numpy" 2>/dev/null; then
    echo "Python package not loaded: $python has no numpy"
else
    # With no variable pointing anywhere, the package loads the libstrata beside it.
    out=$(cd "$tmp" && env -u STRATA_LIBRARY_PATH -u LD_LIBRARY_PATH PYTHONPATH="$pythondir" \
          timeout $step_timeout "$python" -c \
          'import strata; print(strata.library_path()); print(strata.version())' 2>&1) ||
        fail "the installed Python package: $out"
    [ "$(head -1 <<<"$out")" = "$libdir/libstrata.so.0" ] ||
        fail "the installed Python package loads $(head -1 <<<"$out"), not $libdir/libstrata.so.0"
    pass "the Python package in ${pythondir_rel} loads the libstrata installed with it"
    # pip, offline, from a copy of python/ (pip builds in the source folder).
    cp -r "$source/python" "$tmp/python-src" && rm -rf "$tmp/python-src/strata/__pycache__"
    if "$python" -m pip --version >/dev/null 2>&1 && "$python" -c "import setuptools" 2>/dev/null; then
        out=$(timeout $step_timeout "$python" -m pip install --no-build-isolation --no-index \
              --no-warn-script-location --prefix "$tmp/pip" "$tmp/python-src" 2>&1) ||
            fail "pip install --no-build-isolation ./python: $out"
        site=$(find "$tmp/pip" -name __init__.py -path '*/strata/*' -printf '%h\n' | head -1)
        [ -n "$site" ] || fail "pip installed no strata package under $tmp/pip"
        out=$(cd "$tmp" && PYTHONPATH=$(dirname "$site") STRATA_LIBRARY_PATH=$libdir \
              timeout $step_timeout "$python" -c 'import strata; print(strata.version())' 2>&1) ||
            fail "the package pip installed: $out"
        [ "$out" = "$(sed -n 's/^Version: //p' "$libdir/pkgconfig/strata.pc")" ] ||
            fail "the package pip installed says version $out"
        pass "pip install --no-build-isolation ./python, offline"
    else
        echo "pip install not checked: $python has no pip or setuptools"
    fi
fi

if [ -n "$skip_reason" ]; then
    echo "$passed passed"
    echo "SKIP: the consumer programs: $skip_reason"
    exit 0
fi

# A consumer: runs, prints the installed version; static ones do not load libstrata.so.
version=$(sed -n 's/^Version: //p' "$libdir/pkgconfig/strata.pc")
check_consumer() { # check_consumer NAME BINARY static|shared
    local name=$1 bin=$2 kind=$3 out needed
    needed=$(readelf -d "$bin" 2>/dev/null | grep NEEDED)
    if [ "$kind" = static ]; then
        ! grep -q 'libstrata\.so' <<<"$needed" || fail "$name needs libstrata.so: $needed"
    else
        grep -q 'libstrata\.so\.0' <<<"$needed" || fail "$name does not need libstrata.so.0"
    fi
    out=$(LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout $step_timeout \
          "$bin" 2>&1) || fail "$name exited $?: $out"
    grep -q "^strata $version (" <<<"$out" || fail "$name printed '$out', not strata $version"
    if [ "$kind" = shared ]; then
        loaded=$(LD_LIBRARY_PATH=$libdir ldd "$bin" | grep 'libstrata\.so')
        grep -qF "$libdir/libstrata.so.0" <<<"$loaded" ||
            fail "$name loads another libstrata: $loaded"
    fi
    pass "$name ($kind): $out"
}

# --- CMake: find_package(strata) --------------------------------------------------------
cmake_consumer() { # cmake_consumer BUILD_DIR [-D...]
    local dir=$1 out
    shift
    out=$(timeout $step_timeout "$cmake" -S "$consumer" -B "$dir" -DCMAKE_C_COMPILER="$cc" \
          -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
          -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" "$@" 2>&1) ||
        fail "configuring the CMake consumer ($*): $out"
    printf '%s\n' "$out" >"$dir/configure.log"
    out=$(timeout $step_timeout "$cmake" --build "$dir" 2>&1) ||
        fail "building the CMake consumer ($*): $out"
}
cmake_consumer "$tmp/cmake"
check_consumer "find_package strata::strata" "$tmp/cmake/consumer_shared" shared
check_consumer "find_package strata::strata_static" "$tmp/cmake/consumer_static" static
cmake_consumer "$tmp/cmake-shared" -DCONSUMER_COMPONENTS=shared
check_consumer "find_package COMPONENTS shared" "$tmp/cmake-shared/consumer_shared" shared
# libstrata.a's dependencies out of pkg-config's sight: find_package(strata) still gives
# strata::strata, and says why the archive is left out; COMPONENTS static fails.
mkdir -p "$tmp/no-modules"
PKG_CONFIG_LIBDIR=$tmp/no-modules PKG_CONFIG_PATH= \
    cmake_consumer "$tmp/cmake-nodeps" -DCONSUMER_WITHOUT_STATIC=ON
grep -q 'strata::strata_static needs .*not found' "$tmp/cmake-nodeps/configure.log" ||
    fail "no STATUS line on the left-out archive: $(cat "$tmp/cmake-nodeps/configure.log")"
check_consumer "find_package, archive's dependencies missing" \
    "$tmp/cmake-nodeps/consumer_shared" shared
if PKG_CONFIG_LIBDIR=$tmp/no-modules PKG_CONFIG_PATH= timeout $step_timeout "$cmake" \
       -S "$consumer" -B "$tmp/cmake-nodeps-static" -DCMAKE_C_COMPILER="$cc" \
       -DCMAKE_PREFIX_PATH="$prefix" -DCONSUMER_COMPONENTS=static >/dev/null 2>&1; then
    fail "find_package(strata COMPONENTS static) succeeded without the archive's dependencies"
else
    pass "find_package(strata COMPONENTS static) fails without the archive's dependencies"
fi

# --- pkg-config ---------------------------------------------------------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
[ "$(pkg-config --modversion strata)" = "$version" ] || fail "pkg-config --modversion strata"
cflags=$(pkg-config --cflags strata) || fail "pkg-config --cflags strata"
libs=$(pkg-config --libs strata) || fail "pkg-config --libs strata"
# shellcheck disable=SC2086 # flags are words
out=$(timeout $step_timeout "$cc" $flags "$consumer/consumer.c" -o "$tmp/pc_shared" $cflags \
      $libs 2>&1) || fail "cc ... \$(pkg-config --cflags --libs strata): $out"
check_consumer "pkg-config strata" "$tmp/pc_shared" shared
# -lstrata is libstrata.so where both are installed: the archive is asked for by name, as
# README.md ("Installing") does.
libs=$(pkg-config --static --libs strata) || fail "pkg-config --static --libs strata"
# shellcheck disable=SC2086
out=$(timeout $step_timeout "$cc" $flags "$consumer/consumer.c" -o "$tmp/pc_static" $cflags \
      ${libs/-lstrata/-Wl,-Bstatic -lstrata -Wl,-Bdynamic} 2>&1) ||
    fail "cc ... \$(pkg-config --static --libs strata): $out"
check_consumer "pkg-config --static strata" "$tmp/pc_static" static

echo "$passed passed, 0 failed"
