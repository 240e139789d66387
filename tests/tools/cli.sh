# The command line every strata tool shares (tools/tool_cli.c), checked the same way for
# each: sourced by tests/tools/test_strata_*.sh. Each check returns 0, or prints what it
# found and returns 1; the calling script counts it with its own fail().

cli_out=$(mktemp /tmp/strata-test-cli-out-XXXXXX)
cli_err=$(mktemp /tmp/strata-test-cli-err-XXXXXX)
cli_cleanup() { rm -f "$cli_out" "$cli_err"; }

cli_run() { # CMD...: run it bounded in time, its output in $cli_out and $cli_err
    timeout 20 "$@" >"$cli_out" 2>"$cli_err"
}

cli_show() { # what was expected: print it with what the command wrote
    echo "$1"
    echo "  stdout: $(head -c 2000 "$cli_out")"
    echo "  stderr: $(head -c 2000 "$cli_err")"
    return 1
}

# cli_version NAME BIN [plain]: -V and --version print one line "NAME X.Y.Z (BUILD)", BUILD
# being libstrata's build options, on stdout, nothing on stderr, and exit 0; with "plain",
# "NAME X.Y.Z" (strata-run links no libstrata).
cli_version() {
    local name=$1 bin=$2 build=' \(cuda=(on|off) hip=(on|off) verbs=(on|off) ucx=(on|off) chaos=(on|off) sanitize=[a-z]+\)'
    [ "${3:-}" = plain ] && build=
    for flag in -V --version; do
        cli_run "$bin" "$flag"
        local rc=$?
        [ $rc -eq 0 ] || { cli_show "$name $flag exited $rc, expected 0"; return 1; }
        [ "$(wc -l <"$cli_out")" -eq 1 ] && grep -qE "^$name [0-9]+\.[0-9]+\.[0-9]+$build\$" "$cli_out" ||
            { cli_show "$name $flag: not one version line"; return 1; }
        [ ! -s "$cli_err" ] || { cli_show "$name $flag wrote to stderr"; return 1; }
    done
}

# cli_help BIN ARGS...: the usage on stdout (its first line "Usage: ..."), nothing on stderr,
# exit 0.
cli_help() {
    cli_run "$@"
    local rc=$?
    [ $rc -eq 0 ] || { cli_show "'$*' exited $rc, expected 0"; return 1; }
    head -1 "$cli_out" | grep -q '^Usage: ' || { cli_show "'$*': no usage on stdout"; return 1; }
    [ ! -s "$cli_err" ] || { cli_show "'$*' wrote to stderr"; return 1; }
}

# cli_usage_error LINE BIN ARGS...: exit 2, nothing on stdout, and LINE, whole, as the first
# line on stderr.
cli_usage_error() {
    local line=$1
    shift
    cli_run "$@"
    local rc=$?
    [ $rc -eq 2 ] || { cli_show "'$*' exited $rc, expected 2"; return 1; }
    [ ! -s "$cli_out" ] || { cli_show "'$*' wrote to stdout"; return 1; }
    [ "$(head -1 "$cli_err")" = "$line" ] || { cli_show "'$*': expected on stderr: $line"; return 1; }
}

# cli_unknown_subcommand TOOL BIN: "TOOL: unknown subcommand 'foo'", then the usage, on
# stderr, exit 2; the same with no subcommand ("TOOL: no subcommand").
cli_unknown_subcommand() {
    local tool=$1 bin=$2
    cli_usage_error "$tool: unknown subcommand 'foo'" "$bin" foo || return 1
    grep -q '^Usage: ' "$cli_err" || { cli_show "$tool foo: no usage after the message"; return 1; }
    cli_usage_error "$tool: no subcommand" "$bin" || return 1
    grep -q '^Usage: ' "$cli_err" || { cli_show "$tool: no usage after the message"; return 1; }
}

# A terminal for a command: util-linux's script(1), which gives it a pseudo-terminal.
cli_have_pty() {
    command -v script >/dev/null 2>&1 && script -qec true /dev/null </dev/null >/dev/null 2>&1
}

# cli_on_terminal SECONDS CMD...: runs CMD on a pseudo-terminal for at most SECONDS, its
# output to stdout. script(1) hands its command to $SHELL (/bin/sh when unset), and printf %q
# quotes for bash (a newline becomes $'\n', which dash reads as a '$' and a quoted string), so
# bash is named here.
cli_on_terminal() {
    local seconds=$1
    shift
    SHELL=$BASH timeout "$seconds" script -qec "$(printf '%q ' "$@")" /dev/null </dev/null
}

# cli_progress_drawn TEXT FILE: FILE, what a command wrote to a terminal, has a progress line
# starting with TEXT, drawn in place (after a carriage return), and the last of its lines
# (those that start as TEXT does, up to its first digit) is cleared at the end: blanks over
# it, then a carriage return.
cli_progress_drawn() {
    local text=$1 file=$2 prefix
    prefix=$(sed 's/[0-9].*//; s/[][\.*^$(){}+?|/]/\\&/g' <<<"$text")
    grep -qF $'\r'"$text" "$file" || { echo "no progress line '$text' drawn in place"; return 1; }
    grep -qE $'\r'"$prefix"$'[^\r]*\r +\r' "$file" ||
        { echo "the progress line '$text' is not cleared"; return 1; }
}

# cli_progress_absent TEXT FILE: FILE, a command's stderr that was no terminal, has neither
# the progress line nor a carriage return.
cli_progress_absent() {
    local text=$1 file=$2
    ! grep -qF -- "$text" "$file" && ! grep -q $'\r' "$file" ||
        { echo "a progress line '$text' where stderr was no terminal"; return 1; }
}

# cli_progress TEXT CMD...: CMD draws its progress line TEXT on a terminal, and leaves it out
# of its stderr when that is a file. CMD must exit 0 both times.
cli_progress() {
    local text=$1
    shift
    cli_on_terminal 120 "$@" >"$cli_out" 2>&1 ||
        { cli_show "'$*' on a terminal exited $?"; return 1; }
    cli_progress_drawn "$text" "$cli_out" || { cli_show "'$*' on a terminal"; return 1; }
    timeout 120 "$@" >/dev/null 2>"$cli_err" || { cli_show "'$*' exited $?"; return 1; }
    cli_progress_absent "$text" "$cli_err" || { cli_show "'$*'"; return 1; }
}
