#!/usr/bin/env bash
# The combine's fp32 sums must round once per multiply and once per add on every backend, or
# its results differ from the reference bit for bit. Compiles the GPU kernels with the
# build's own flags and fails if the compiler was allowed to fuse a multiply and an add.
#   check_no_fma.sh hip  <hipcc> <arch> <flags...>   LLVM IR: no fmuladd/fma, no 'contract'
#   check_no_fma.sh cuda <nvcc> <arch> <flags...>    PTX: no fma/mad on f32
set -euo pipefail
kind=$1 compiler=$2 arch=$3; shift 3
out=$(mktemp /tmp/strata-no-fma-XXXXXX)
trap 'rm -f "$out"' EXIT

case $kind in
hip)
    "$compiler" --offload-arch="$arch" --cuda-device-only -S -emit-llvm "$@" -o "$out" 2>/dev/null
    fused='llvm\.fmuladd|llvm\.fma\.|(fmul|fadd|fsub)( [a-z]+)* contract'
    ;;
cuda)
    "$compiler" -arch="sm_$arch" -ptx "$@" -o "$out"
    fused='(fma|mad)(\.[a-z]+)*\.f32'
    ;;
*)
    echo "check_no_fma: unknown kind $kind" >&2
    exit 2
    ;;
esac
if [ ! -s "$out" ]; then
    echo "check_no_fma: $compiler produced nothing" >&2
    exit 1
fi
if grep -nE "$fused" "$out" | head -5 | grep .; then
    echo "FAIL: $kind kernels for $arch fuse fp32 multiply-adds (flags: $*)"
    exit 1
fi
echo "ok: $kind kernels for $arch have no fused fp32 multiply-add"
