#!/usr/bin/env bash
# An offline bundle of what strata builds and runs with, for GPU nodes that cannot reach a
# package mirror (and need no root to use it).
#
#   scripts/deps-bundle.sh DIR                   on a Debian 12 machine with apt: download the
#                                                Debian packages strata needs, with the
#                                                libraries they need, into DIR
#   scripts/deps-bundle.sh --install DIR PREFIX  anywhere: unpack DIR's packages into PREFIX
#                                                and print the environment that points
#                                                pkg-config, CMake, the compiler and the
#                                                loader at it (eval "$(...)")
#
# Left out: what every Linux machine with a compiler has (the C library, gcc, binutils, perl,
# the init system) and the other compilers Open MPI's packages pull in. The CUDA toolkit and
# driver, and ROCm, are the node's own. scripts/gpu-check.sh --deps DIR installs a bundle
# into a scratch prefix and builds against it.
set -euo pipefail

packages=(
    cmake pkg-config                                       # the build
    libhwloc-dev libxml2-dev libicu-dev libjansson-dev     # topology, files (libxml2 needs ICU's headers)
    libfabric-dev libibverbs-dev libucx-dev                # transports
    libcmocka-dev                                          # the tests
    libopenmpi-dev openmpi-bin                             # strata-bench intra's baseline and launcher
)
# Regular expressions of package names never bundled (see above).
skip='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|gcc.*|cpp.*|g\+\+.*|gfortran.*|flang.*|'
skip+='libflang.*|libllvm.*|libclang.*|libmlir.*|binutils.*|libbinutils|libctf.*|libgprofng0|'
skip+='libgcc.*|libstdc\+\+.*|libasan.*|libtsan.*|liblsan.*|libubsan.*|libitm1|libquadmath0|'
skip+='libgomp1|libatomic1|libcc1-0|libisl23|libmpc3|libmpfr6|libgfortran-.*-dev|'
skip+='perl|perl-base|perl-modules-.*|libperl.*|lib.*-perl|debconf|cdebconf|dpkg|tar|'
skip+='adduser|passwd|init-system-helpers|usr-is-merged|usrmerge|debianutils|procps|'
skip+='libproc2-0|libpam.*|libsystemd0|libelogind0|libudev1|libselinux1|libsemanage.*|'
skip+='libsepol2|libaudit.*|libcap-ng0|autoconf|automake|autotools-dev|m4|install-info|'
skip+='openssh-client|libx11-.*|libxcb1|libxau6|libxdmcp6|libxext6|libxnvctrl0|'
skip+='ocl-icd-libopencl1|libjs-.*|readline-common|libdebian-installer4|libnewt0.52|'
skip+='libslang2|libtextwrap1|libz3-4)$'

usage() {
    echo "usage: $0 DIR | --install DIR PREFIX" >&2
    exit 2
}

download() {
    local dir=$1 names
    command -v apt-get >/dev/null || { echo "deps-bundle: apt-get is needed to download" >&2; exit 1; }
    mkdir -p "$dir"
    # Every package the list needs, recursively, as names of real packages (virtual ones
    # print as <name>), less those never bundled.
    names=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                --no-breaks --no-replaces --no-enhances "${packages[@]}" |
            grep -E '^[a-z0-9]' | sort -u | grep -vE "$skip")
    [ -n "$names" ] || { echo "deps-bundle: apt found none of the packages (apt-get update?)" >&2; exit 1; }
    # shellcheck disable=SC2086
    (cd "$dir" && apt-get download $names >/dev/null)
    echo "deps-bundle: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1), in $dir"
}

install() {
    local dir=$1 prefix=$2 multiarch=x86_64-linux-gnu
    ls "$dir"/*.deb >/dev/null 2>&1 || { echo "deps-bundle: no .deb in $dir" >&2; exit 1; }
    mkdir -p "$prefix"
    prefix=$(cd "$prefix" && pwd)
    for deb in "$dir"/*.deb; do
        dpkg-deb -x "$deb" "$prefix" 2>/dev/null || (cd "$prefix" && ar p "$deb" 'data.tar.*' | tar -xJf - 2>/dev/null) ||
            { echo "deps-bundle: cannot unpack $deb (dpkg-deb, or ar and tar, are needed)" >&2; exit 1; }
    done
    local lib=$prefix/usr/lib/$multiarch
    # What Debian's alternatives would name: Open MPI's programs and pkg-config files.
    for tool in "$prefix"/usr/bin/*.openmpi; do
        [ -e "${tool%.openmpi}" ] || ln -s "$(basename "$tool")" "${tool%.openmpi}"
    done
    for pc in "$lib"/pkgconfig/ompi*.pc; do
        local mpi=$lib/pkgconfig/mpi${pc##*/ompi}
        [ -e "$mpi" ] || ln -s "$(basename "$pc")" "$mpi"
    done
    # pkg-config's files say prefix=/usr: the sysroot puts $prefix in front of their paths.
    cat <<ENV
export PATH="$prefix/usr/bin:\$PATH"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
export CMAKE_PREFIX_PATH="$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export CPATH="$prefix/usr/include:$prefix/usr/include/$multiarch\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$prefix/usr"
ENV
}

case ${1:-} in
    --install) [ $# -eq 3 ] || usage; install "$2" "$3" ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    ''|-*) usage ;;
    *) [ $# -eq 1 ] || usage; download "$1" ;;
esac
