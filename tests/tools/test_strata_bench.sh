#!/usr/bin/env bash
# strata-bench p2p runs end to end on a small size range and prints a row per size; where
# strata-bench has its intra subcommand (built with MPI) and the build is not sanitized
# (third argument), intra and moe run on small shapes and print every path, moe also its
# host-copied bytes and the breakdown of a step.
set -u
run=$1 bench=$2 sanitize=${3:-}
out=$(STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo "$run" -n 2 --timeout 120 -- \
      "$bench" p2p --min 8 --max 64k 2>&1)
rc=$?
rows=$(grep -cE '^\[r0\] +[0-9]+ \|' <<<"$out")
if [ $rc -ne 0 ] || [ "$rows" -ne 14 ]; then
    echo "$out"
    echo "0 passed, 1 failed"
    exit 1
fi
"$run" -n 1 -- "$bench" p2p >/dev/null 2>&1
[ $? -eq 2 ] || { echo "one rank should be refused (exit 2)"; echo "1 passed, 1 failed"; exit 1; }
if [ -z "$sanitize" ] && command -v mpirun >/dev/null 2>&1 && "$bench" intra --help >/dev/null 2>&1; then
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
          mpirun --oversubscribe -n 2 "$bench" intra --tokens 8,64 --hidden 256 --iters 5 2>&1)
    rc=$?
    rows=$(grep -cE '^ +(8|64) (memcpy|MPI_Alltoallv|strata push|strata pull) ' <<<"$out")
    if [ $rc -ne 0 ] || [ "$rows" -ne 8 ]; then
        echo "$out"
        echo "2 passed, 1 failed"
        exit 1
    fi
    # moe: 2 nodes of 2 ranks named on this machine, strata over tcp on loopback.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo \
          "$bench" moe --ranks-per-node 2 --tokens 8,64 --hidden 256 --iters 3 --breakdown 2>&1)
    rc=$?
    rows=$(grep -cE '^ +(8|64) (MPI_Alltoallv|strata flat|strata hier) ' <<<"$out")
    # per size and route: the host-copied bytes line and the breakdown of a step
    copied=$(grep -cE '^ +(8|64) strata (flat|hier): host-copied bytes per step: [0-9]+ ' <<<"$out")
    phases=$(grep -cE '^ +(8|64) (flat|hier) +breakdown \| layout .*reduce .*post delay' <<<"$out")
    if [ $rc -ne 0 ] || [ "$rows" -ne 6 ] || [ "$copied" -ne 4 ] || [ "$phases" -ne 4 ] ||
       ! grep -q '2 nodes' <<<"$out"; then
        echo "$out"
        echo "3 passed, 1 failed"
        exit 1
    fi
    echo "4 passed, 0 failed"
    exit 0
fi
echo "2 passed, 0 failed"
