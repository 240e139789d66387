#!/usr/bin/env bash
# The layer rule (cmake/StrataCompile.cmake) as the compiler sees it: probe files compiled
# as files of a layer. The allowed probe must build; each other probe must fail to build,
# and fail because the header it names is not found, not for another reason.
# An include through ".." would go around the rule (out of a folder, or up through a layer's
# link to the repository root): none may have one.
# Usage: test_layers.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
source=$2
failed=0
log=$(mktemp /tmp/strata-layers-XXXXXX)
trap 'rm -f "$log"' EXIT

# probe NAME: build the probe's object; returns the build's exit status, output in $log.
probe() {
    timeout 300 cmake --build "$build" --target "layer_probe_$1" >"$log" 2>&1
}

if probe scheduler_allowed; then
    echo "ok: a scheduler file builds with both tiers', util's and the public headers"
else
    echo "FAIL: the allowed probe did not build:"; tail -20 "$log"; failed=1
fi
# NAME and the header whose absence must stop it.
for refusal in "util_upward scheduler/sched.h" "util_public strata/strata.h" \
               "intra_sibling inter/engine.h" "adaptive_upward scheduler/sched.h"; do
    set -- $refusal
    if probe "$1"; then
        echo "FAIL: probe $1 built: the layer rule let it include $2"; failed=1
    elif grep -qE "$2: No such file or directory|'$2' file not found" "$log"; then  # gcc, clang
        echo "ok: probe $1 refused: $2 not found"
    else
        echo "FAIL: probe $1 failed to build, but not for $2:"; tail -20 "$log"; failed=1
    fi
done
# Kernel bodies: only the three kernel translation units (and the kernels' own headers)
# include a header of intra/kernels/; everyone else may include only the plain types and
# limits (moe_format.h, net_format.h) and the kernel ids, so a body header added later is
# covered without being named here.
shared='(moe_format|net_format|kernel_ids)\.h"'
includers=$(cd "$source" &&
            grep -rlE '#[[:space:]]*include[[:space:]]*"([^"]*/)?kernels/[a-z_]+\.h"' \
                util topo inter intra scheduler adaptive api tools |
            grep -vxE 'intra/kernels/[a-z_]+\.h|intra/host/host_kernels\.c|intra/cuda/cuda_kernels\.cu|intra/hip/hip_kernels\.hip' |
            while read -r file; do
                grep -E '#[[:space:]]*include[[:space:]]*"([^"]*/)?kernels/[a-z_]+\.h"' "$file" |
                    grep -qvE "kernels/$shared" && echo "$file"
            done)
if [ -z "$includers" ]; then
    echo "ok: only the three kernel translation units include the kernel bodies"
else
    echo "FAIL: kernel bodies included outside the kernel translation units:"; echo "$includers"
    failed=1
fi
climbing=$(cd "$source" && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]*\.\./' \
               util topo inter intra scheduler adaptive api)
if [ -z "$climbing" ]; then
    echo "ok: no layer file includes through a path with .."
else
    echo "FAIL: includes through .. around the layer rule:"; echo "$climbing"; failed=1
fi
exit $failed
