#!/usr/bin/env bash
# strata-bench p2p runs end to end on a small size range and prints a row per size, and kv
# a row and a paged/raw line per page size; p2p also
# against the same engine without rate control (each engine's rate figures); its
# command line (version, help, each usage error's message; progress on a terminal); where
# strata-bench has its intra subcommand (built with MPI) and the build is not sanitized
# (third argument), intra and moe run on small shapes and print every path, moe also its
# host-copied bytes and the breakdown of a step, moe --combine its two combine modes' times
# and bytes, and moe --modes its table of modes; moe under strata-run on shaped links is one
# job set against its busiest link, and refused where the ranks cannot join.
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
# Against the same engine without rate control: a row per size, then each engine's figures,
# the paced one with a window (16 KiB chunks: the window binds) and writes held.
out=$(STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_STRIPE_MIN=16k \
      "$run" -n 2 --timeout 120 -- "$bench" p2p --min 64k --max 256k --reps 3 \
      --baseline no-rate-control 2>&1)
rc=$?
rows=$(grep -cE '^\[r0\] +[0-9]+ \|' <<<"$out")
if [ $rc -ne 0 ] || [ "$rows" -ne 3 ] ||
   ! grep -qE '^\[r0\] # rate control off: rate [0-9.]+ MB/s, base RTT [0-9.]+ us, window none, 0 writes held' <<<"$out" ||
   ! grep -qE '^\[r0\] # rate control on : rate [0-9.]+ MB/s, base RTT [0-9.]+ us, window [0-9]+ KiB, [1-9][0-9]* writes held' <<<"$out"; then
    echo "$out"
    echo "2 passed, 1 failed"
    exit 1
fi

# kv: a row per page size and its paged/raw line, small lists.
out=$(STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo "$run" -n 2 --timeout 120 -- \
      "$bench" kv --page-sizes 16k,64k --pages 32 --lists 3 2>&1)
rc=$?
rows=$(grep -cE '^\[r0\] +[0-9]+ \|' <<<"$out")
ratios=$(grep -cE '^\[r0\] paged/raw: pages/s [0-9.]+ \([0-9]+-byte pages, p50\)$' <<<"$out")
if [ $rc -ne 0 ] || [ "$rows" -ne 2 ] || [ "$ratios" -ne 2 ]; then
    echo "$out"
    echo "2 passed, 1 failed"
    exit 1
fi

# The command line every tool shares (tests/tools/cli.sh): each mistake its own message.
. "$(dirname "$0")/cli.sh"
trap cli_cleanup EXIT
cli_failed=0
check() { "$@" || cli_failed=$((cli_failed + 1)); }
check cli_version strata-bench "$bench"
check cli_help "$bench" --help
check cli_help "$bench" -h
for sub in p2p incast intra moe kv weights; do
    check cli_help "$bench" $sub --help
done
check cli_unknown_subcommand strata-bench "$bench"
check cli_usage_error "strata-bench: unknown option '--bogus' before the subcommand (see --help)" \
    "$bench" --bogus
check cli_usage_error "strata-bench p2p: unknown option '--bogus' (see --help)" "$bench" p2p --bogus
check cli_usage_error "strata-bench kv: --pages 40000 is out of range (1..4096) (see --help)" \
    "$bench" kv --pages 40000
check cli_usage_error "strata-bench kv: --pages 4096: more than half the 2048 pages of 65536 bytes a 128 MiB region holds (see --help)" \
    "$bench" kv --pages 4096
check cli_usage_error "strata-bench p2p: option '--min' needs a value (see --help)" "$bench" p2p --min
check cli_usage_error "strata-bench p2p: --min: '8x' is not a size (bytes, or with k, m or g) (see --help)" \
    "$bench" p2p --min 8x
check cli_usage_error "strata-bench p2p: --min 4 is out of range (8..1073741824) (see --help)" \
    "$bench" p2p --min 4
check cli_usage_error "strata-bench p2p: --max 2g is out of range (8..1073741824) (see --help)" \
    "$bench" p2p --max 2g
check cli_usage_error "strata-bench p2p: --max 512 is below --min 1024 (see --help)" \
    "$bench" p2p --min 1k --max 512
check cli_usage_error "strata-bench p2p: unexpected argument 'extra' (see --help)" "$bench" p2p extra
check cli_usage_error "strata-bench p2p: --baseline takes raw or no-rate-control, not 'mpi' (see --help)" \
    "$bench" p2p --baseline mpi
check cli_usage_error "strata-bench p2p: --reps 0 is out of range (1..101) (see --help)" \
    "$bench" p2p --reps 0
# A number is written plainly: strto* alone would take a space or a '+' first.
check cli_usage_error "strata-bench p2p: --reps: ' 5' is not an integer (see --help)" \
    "$bench" p2p --reps " 5"
check cli_usage_error "strata-bench p2p: --reps: '+5' is not an integer (see --help)" \
    "$bench" p2p --reps +5
check cli_usage_error "strata-bench p2p: --min: '+8' is not a size (bytes, or with k, m or g) (see --help)" \
    "$bench" p2p --min +8
check cli_usage_error "strata-bench incast: option '--help' takes no value (found 'yes') (see --help)" \
    "$bench" incast --help=yes
check cli_usage_error "strata-bench incast: --phases: 'ten' is not an integer (see --help)" \
    "$bench" incast --phases ten
check cli_usage_error "strata-bench incast: --seconds 0 is out of range (0.01..3600) (see --help)" \
    "$bench" incast --seconds 0
check cli_usage_error "strata-bench incast: --rate-control 'maybe' is not on, off or both (see --help)" \
    "$bench" incast --rate-control maybe
if "$bench" intra --help >/dev/null 2>&1; then # built with MPI
    check cli_usage_error "strata-bench intra: --tokens: 'x' is not an integer (see --help)" \
        "$bench" intra --tokens 8,x
    check cli_usage_error "strata-bench intra: --tokens 0 is out of range (1..1048576) (see --help)" \
        "$bench" intra --tokens 0
    check cli_usage_error "strata-bench intra: --device gpu9: no such device backend (see --help)" \
        "$bench" intra --device gpu9
    check cli_usage_error "strata-bench moe: --route 'diagonal' is not flat or hier (see --help)" \
        "$bench" moe --route diagonal
    check cli_usage_error "strata-bench moe: --zipf 20 is out of range (0..16) (see --help)" \
        "$bench" moe --zipf 20
    check cli_usage_error "strata-bench moe: option '--modes' needs a value (see --help)" \
        "$bench" moe --modes
    check cli_usage_error "strata-bench moe: --combine 'exact,exact' is not exact, node-reduce or both, each once (see --help)" \
        "$bench" moe --combine exact,exact
    check cli_usage_error "strata-bench moe: --combine, --exchange and --receive: give one (see --help)" \
        "$bench" moe --combine exact --exchange streamed
    check cli_usage_error "strata-bench moe: --receive 'exact,exact' is not blocks, exact or both, each once (see --help)" \
        "$bench" moe --receive exact,exact
    check cli_usage_error "strata-bench moe: --expert-classes measures the modes of --modes (see --help)" \
        "$bench" moe --expert-classes
else
    check cli_usage_error "strata-bench: subcommand 'intra' is not built in: this strata-bench was built without MPI (see --help)" \
        "$bench" intra
fi
# Progress: under strata-run on a terminal (script(1) gives it one), rank 0 gets a terminal
# too and draws the line, which strata-run shows after its prefix; with strata-run's stderr
# a file, no rank draws it.
if cli_have_pty; then
    p2p=(p2p --min 8 --max 4k)
    STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo \
        cli_on_terminal 120 "$run" -n 2 --timeout 100 -- "$bench" "${p2p[@]}" >"$cli_out" 2>&1 ||
        { cli_show "p2p under strata-run on a terminal exited $?"; cli_failed=$((cli_failed + 1)); }
    check cli_progress_drawn "[r0] p2p 0/10 sizes" "$cli_out"
    grep -qE '\[r0\] +4096 \|' "$cli_out" ||
        { cli_show "p2p under strata-run on a terminal: no row for 4096 bytes"; cli_failed=$((cli_failed + 1)); }
    STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo timeout 120 "$run" -n 2 --timeout 100 -- \
        "$bench" "${p2p[@]}" >/dev/null 2>"$cli_err" ||
        { cli_show "p2p exited $?"; cli_failed=$((cli_failed + 1)); }
    check cli_progress_absent "p2p 0/10 sizes" "$cli_err"
else
    echo "progress line not checked: script(1) from util-linux is not installed"
fi
[ "$cli_failed" -eq 0 ] || { echo "2 passed, 1 failed ($cli_failed command-line checks)"; exit 1; }
if [ -z "$sanitize" ] && command -v mpirun >/dev/null 2>&1 && "$bench" intra --help >/dev/null 2>&1; then
    # --progress: rank 0 draws its line on the pipe mpirun gives it (stderr, kept apart).
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
          mpirun --oversubscribe -n 2 "$bench" intra --tokens 8,64 --hidden 256 --iters 5 \
          --progress 2>"$cli_err")
    rc=$?
    rows=$(grep -cE '^ +(8|64) (memcpy|MPI_Alltoallv|strata push|strata pull) ' <<<"$out")
    progress=$(cli_progress_drawn "intra 0/2 token counts" "$cli_err")
    if [ $rc -ne 0 ] || [ "$rows" -ne 8 ] || [ -n "$progress" ]; then
        echo "$out"
        cat "$cli_err"
        echo "$progress"
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
    # moe --combine: exact and node-reduce on the hierarchical route, one step of each in
    # turn; the same rows cross nodes, and node-reduce's combine sends fewer bytes (top-8 of
    # 32 experts: a token has about four experts on the other node, whose terms go as one).
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo \
          "$bench" moe --ranks-per-node 2 --tokens 32 --hidden 256 --iters 3 \
          --combine exact,node-reduce 2>&1)
    rc=$?
    rows=$(grep -cE '^ +32 hier (exact|node-reduce) +\|' <<<"$out")
    bytes() { sed -nE "s/^ +32 combine $1: rank 0 to other nodes per step: ([0-9]+) rows, ([0-9]+) payload bytes with combine; 1 dispatch rounds; step p50 [0-9.]+ us, p99 [0-9.]+ us\$/\1 \2/p" <<<"$out"; }
    read -r exact_rows exact_bytes <<<"$(bytes exact)"
    read -r nr_rows nr_bytes <<<"$(bytes node-reduce)"
    if [ $rc -ne 0 ] || [ "$rows" -ne 2 ] || [ -z "${exact_bytes:-}" ] || [ -z "${nr_bytes:-}" ] ||
       [ "$exact_rows" != "$nr_rows" ] || [ "$nr_bytes" -ge "$exact_bytes" ]; then
        echo "$out"
        echo "4 passed, 1 failed"
        exit 1
    fi
    # moe --exchange: worst-case and streamed, one step of each in turn, with a window of 8
    # tokens a round (hidden 256, top-8, 1 peer: per token four 560-byte entries, and two
    # buffers each of 8 returned and 8 received 512-byte rows: 18624 bytes): the same rows
    # cross nodes, worst-case in one round and streamed in 4, and the ratio line.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo -x STRATA_MOE_WINDOW_BYTES=148992 \
          "$bench" moe --ranks-per-node 2 --tokens 32 --hidden 256 --iters 3 \
          --exchange worst-case,streamed 2>&1)
    rc=$?
    rounds() { sed -nE "s/^ +32 exchange $1: rank 0 to other nodes per step: ([0-9]+) rows, [0-9]+ payload bytes with combine; ([0-9]+) dispatch rounds; step p50 [0-9.]+ us, p99 [0-9.]+ us\$/\1 \2/p" <<<"$out"; }
    read -r wc_rows wc_rounds <<<"$(rounds worst-case)"
    read -r st_rows st_rounds <<<"$(rounds streamed)"
    if [ $rc -ne 0 ] || [ -z "${st_rows:-}" ] || [ "${wc_rows:-}" != "$st_rows" ] ||
       [ "${wc_rounds:-}" != 1 ] || [ "$st_rounds" != 4 ] ||
       ! grep -qE '^streamed/worst-case: step p50 [0-9]+\.[0-9]+, p99 [0-9]+\.[0-9]+$' <<<"$out"; then
        echo "$out"
        echo "4 passed, 1 failed"
        exit 1
    fi
    # moe --receive: blocks and exact both on the worst-case exchange (one round, where the
    # window above would take the streamed one 4), one step of each in turn: the same rows
    # cross nodes, exact's into buffers of the caller's, and the ratio line.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo -x STRATA_MOE_WINDOW_BYTES=148992 \
          "$bench" moe --ranks-per-node 2 --tokens 32 --hidden 256 --iters 3 \
          --receive blocks,exact 2>&1)
    rc=$?
    moved() { sed -nE "s/^ +32 receive $1: rank 0 to other nodes per step: ([0-9]+) rows, [0-9]+ payload bytes with combine; ([0-9]+) dispatch rounds; .*/\1 \2/p" <<<"$out"; }
    if [ $rc -ne 0 ] || [ -z "$(moved exact)" ] || [ "$(moved blocks)" != "$(moved exact)" ] ||
       [ "$(moved exact | cut -d' ' -f2)" != 1 ] ||
       ! grep -qE '^exact/blocks: step p50 [0-9]+\.[0-9]+, p99 [0-9]+\.[0-9]+$' <<<"$out"; then
        echo "$out"
        echo "4 passed, 1 failed"
        exit 1
    fi
    # moe --modes: the same drifting Zipf routing through push, pull, adaptive and a fixed
    # mask of 4 of 16 experts; each object's experts must have moved in its own modes. With
    # --expert-classes, every one of rank 0's 4 experts of each of the 12 timed steps is
    # timed in one class, in each mode (48 samples a column).
    mask=$(mktemp /tmp/strata-test-bench-mask-XXXXXX)
    trap 'rm -f "$mask"; cli_cleanup' EXIT
    echo '{"format": "strata-modes", "version": 1, "num_experts": 16, "pull": [1, 4, 9, 14]}' >"$mask"
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo \
          "$bench" moe --ranks-per-node 2 --modes fixed:"$mask",push,pull,adaptive --tokens 16 \
          --experts 16 --topk 2 --hidden 256 --iters 12 --zipf 1.4 --expert-classes 2>&1)
    rc=$?
    # name, p50, p99, model p50, model p99, switches, pull %
    num='[0-9]+\.[0-9]'
    fixed_rows=$(grep -cE "^(push +($num +){4}0 +0\.0|pull +($num +){4}0 +100\.0|fixed:[^ ]+ +($num +){4}0 +25\.0)\$" <<<"$out")
    adaptive_row=$(grep -cE "^adaptive +($num +){4}[0-9]+ +$num\$" <<<"$out")
    class_rows=$(grep -E "^(no rows|under the mean|mean to 4 x mean|4 x mean or more)( +$num \( *[0-9]+\)){4}( +[0-9.]+)?\$" <<<"$out")
    samples=$(sed -E 's/[^(]*\( *([0-9]+)\).*/\1/' <<<"$class_rows" | awk '{s += $1} END {print s + 0}')
    if [ $rc -ne 0 ] || [ "$fixed_rows" -ne 3 ] || [ "$adaptive_row" -ne 1 ] ||
       [ "$(grep -c . <<<"$class_rows")" -ne 4 ] || [ "$samples" -ne 48 ] ||
       ! grep -qE '^model against clock: [0-6] of [0-6] mode pairs in the same order \(by p50\); [0-6] pairs the model prices alike$' <<<"$out" ||
       ! grep -qE '^adaptive/best fixed mode: step p50 [0-9.]+, p99 [0-9.]+ \(best fixed: (push|pull)\)$' <<<"$out"; then
        echo "$out"
        echo "5 passed, 1 failed"
        exit 1
    fi
    # moe under strata-run: one job of 4 ranks on 2 simulated nodes, its links shaped; no MPI
    # baseline, each route set against its busiest link instead.
    if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then
        out=$(STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 timeout 180 "$run" -n 4 \
              --nodes 2 --link-rate 1gbit --timeout 150 -- "$bench" moe --tokens 16 \
              --hidden 256 --iters 3 2>&1)
        rc=$?
        rows=$(grep -cE '^\[r0\] +16 strata (flat|hier) +\|' <<<"$out")
        bound=$(grep -cE '^\[r0\] +16 strata (flat|hier): busiest link: node [01] sends [1-9][0-9]* bytes per step; link bound [0-9.]+ us at 1 Gbit/s; step / link bound: p50 [0-9.]+, p99 [0-9.]+$' <<<"$out")
        if [ $rc -ne 0 ] || [ "$rows" -ne 2 ] || [ "$bound" -ne 2 ] ||
           ! grep -q '4 ranks on 2 nodes' <<<"$out" || grep -q 'MPI_Alltoallv  ' <<<"$out"; then
            echo "$out"
            echo "6 passed, 1 failed"
            exit 1
        fi
    else
        echo "strata-bench moe under strata-run not run: network namespaces or tc missing"
    fi
    # Ranks that MPI made one-rank jobs while WORLD_SIZE says more, with no way to join: refused.
    out=$(WORLD_SIZE=4 RANK=1 STRATA_BOOTSTRAP_ADDR= MASTER_ADDR= timeout 60 "$bench" moe \
          --tokens 8 --iters 1 2>&1)
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q "MPI started this process as a job of 1 rank while WORLD_SIZE is 4" <<<"$out"; then
        echo "$out"
        echo "exit $rc"
        echo "7 passed, 1 failed"
        exit 1
    fi
    # weights: a small model, both paths' rows and the ratio line.
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 180 \
          mpirun --oversubscribe -n 4 --mca btl self,tcp --mca btl_tcp_if_include lo \
          -x STRATA_INTER_PROVIDER=tcp -x STRATA_INTER_IFACE=lo \
          "$bench" weights --bytes 16m --tensors 100 --rounds 2 2>&1)
    rc=$?
    rows=$(grep -cE '^(mpi|strata) +\| +[0-9.]+ +[0-9.]+ \| +[0-9.]+$' <<<"$out")
    if [ $rc -ne 0 ] || [ "$rows" -ne 2 ] ||
       ! grep -qE '^weights/mpi: time [0-9.]+ \(p50\)$' <<<"$out"; then
        echo "$out"
        echo "8 passed, 1 failed"
        exit 1
    fi
    echo "9 passed, 0 failed"
    exit 0
fi
echo "2 passed, 0 failed"
