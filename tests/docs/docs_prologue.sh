# Sourced on line 1 of every documented block that tests/docs/test_docs_blocks.py runs (bash).
# KS_DOCS_RUN is the page's bookkeeping directory: failures, the shell state between blocks, servers' pids.
# The shell state a block left (variables, exports, directory) is the next block's, as in one terminal.
ks_base_names=" $(compgen -v | tr '\n' ' ') "
if [ -f "$KS_DOCS_RUN/state.sh" ]; then
    source "$KS_DOCS_RUN/state.sh"
    cd "$(cat "$KS_DOCS_RUN/cwd")" || exit 97
fi

# ks_serve DOCUMENTED_PORT REAL_PORT COMMAND: what a reader runs in a terminal of its own. Stop the server
# an earlier block started on that port, start COMMAND in the background (its own session, output to a log),
# and return once REAL_PORT accepts connections, or with COMMAND's status if it exits first.
# Every server gets the settings the pages assume of the reader's service (the root token the shell has
# in KEYSTREAM_TOKEN, key import allowed); a setting on COMMAND's line wins.
ks_serve() {
    local documented=$1 real=$2 command=$3
    local pidfile="$KS_DOCS_RUN/serve-$documented.pid" log="$KS_DOCS_RUN/serve-$documented.log"
    if [ -f "$pidfile" ]; then ks_stop "$(cat "$pidfile")"; fi
    KEYSTREAM_ROOT_TOKEN="$KS_DOCS_TOKEN" KEYSTREAM_ALLOW_KEY_IMPORT=true KEYSTREAM_WORKERS=1 \
        KEYSTREAM_LOG_LEVEL=warning KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN=3 \
        setsid bash -c "$command" </dev/null >>"$log" 2>&1 &
    local pid=$! deadline=$((SECONDS + 60))
    echo "$pid" >"$pidfile"
    until (exec 3<>"/dev/tcp/127.0.0.1/$real") 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            local status=$?
            cat "$log" >&2
            rm -f "$pidfile"
            return "$status"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "ks_serve: '$command' did not listen on port $real within 60 s" >&2
            cat "$log" >&2
            return 124
        fi
        sleep 0.1
    done
}

# ks_stop PID: terminate a server's session and wait until it is gone (SIGKILL after 15 s).
ks_stop() {
    local pid=$1 waited=0
    kill -TERM -- "-$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
        sleep 0.1
        waited=$((waited + 1))
        if [ "$waited" -eq 150 ]; then kill -KILL -- "-$pid" 2>/dev/null; fi
    done
}

# ks_status_was STATUS SHOWN: a console block's `$ echo $?` whose output the page shows: print STATUS as echo
# does, and fail (status 99) unless it is the SHOWN one.
ks_status_was() {
    echo "$1"
    if [ "$1" != "$2" ]; then
        echo "the page shows exit $2 here, the command before ended with $1" >&2
        return 99
    fi
}

# At the end (or an early exit): keep the shell's state for the next block, and say how far the block got.
ks_save() {
    local status=$? name
    {
        export -p
        for name in $(compgen -v); do
            case "$ks_base_names" in *" $name "*) continue ;; esac
            case "$name" in ks_* | BASH* | FUNCNAME | PIPESTATUS | COMP* | status) continue ;; esac
            declare -p "$name" 2>/dev/null
        done
    } >"$KS_DOCS_RUN/state.sh"
    pwd >"$KS_DOCS_RUN/cwd"
    echo "$status ${ks_reached_end:-0}" >"$KS_DOCS_RUN/end"
}
trap ks_save EXIT
trap 'ks_status=$?; echo "$LINENO $ks_status" >>"$KS_DOCS_RUN/failures"' ERR
set -uo pipefail
