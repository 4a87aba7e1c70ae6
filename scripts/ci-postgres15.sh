#!/usr/bin/env bash
# Throwaway PostgreSQL 15 cluster for CI (Debian's postgresql-15 binaries).
#
#   scripts/ci-postgres15.sh start [STATE_FILE]
#       initdb + start a fresh cluster in a new temp dir, listening on 127.0.0.1 only.
#       Progress goes to stderr; stdout ends with the line
#           DSN=postgresql://<user>@127.0.0.1:<port>/postgres
#       The data directory path is written to STATE_FILE.
#   scripts/ci-postgres15.sh stop [STATE_FILE | DATA_DIR]
#       stop that cluster and delete its temp dir (a no-op when it is already gone).
#
# STATE_FILE defaults to $PGTASKS_CI_PG_STATE or ${TMPDIR:-/tmp}/pgtasks-ci-postgres15.state.
#
# Run as root (the CI case), the server runs as the system user "pgtasks-ci" (created with
# useradd --system when missing; falls back to "postgres"); otherwise as the current user.
# Durability settings stay at their defaults (fsync=on, synchronous_commit=on); the server
# gets max_connections=200 and its unix socket inside the temp dir.
#
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), PGTASKS_CI_PG_PORT (first port
# tried, default 54315).  A leftover cluster from an earlier run of this script on that port
# is stopped first; a port held by anything else is skipped.
set -euo pipefail

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
FIRST_PORT="${PGTASKS_CI_PG_PORT:-54315}"
PORT_ATTEMPTS=20
CI_USER="pgtasks-ci"
PREFIX="pgtasks-ci-pg15."
DEFAULT_STATE="${PGTASKS_CI_PG_STATE:-${TMPDIR:-/tmp}/pgtasks-ci-postgres15.state}"

log() { echo "ci-postgres15: $*" >&2; }
die() { log "error: $*"; exit 1; }

is_root() { [[ "$(id -u)" == 0 ]]; }

# Pick the OS user that runs the server.
server_user() {
    if ! is_root; then
        id -un
        return
    fi
    if ! id -u "$CI_USER" >/dev/null 2>&1; then
        if command -v useradd >/dev/null 2>&1 &&
            useradd --system --no-create-home --home-dir /nonexistent \
                --shell /usr/sbin/nologin "$CI_USER" >/dev/null 2>&1; then
            log "created system user $CI_USER"
        elif id -u postgres >/dev/null 2>&1; then
            echo postgres
            return
        else
            die "running as root, and neither user $CI_USER nor postgres exists"
        fi
    fi
    echo "$CI_USER"
}

# Run a command as the given user (directly when we are not root).
as_user() {
    local user="$1"
    shift
    if ! is_root; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$user" -- "$@"
    else
        local quoted
        quoted="$(printf '%q ' "$@")"
        su -s /bin/sh "$user" -c "$quoted"
    fi
}

# Something accepts TCP connections on 127.0.0.1:$1.
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Stop the cluster in data dir $1 (if running) and remove its temp dir when it is ours.
stop_datadir() {
    local datadir="$1" owner parent
    parent="$(dirname "$datadir")"
    if [[ -f "$datadir/PG_VERSION" ]]; then
        owner="$(stat -c %U "$datadir")"
        if ! is_root && [[ "$owner" != "$(id -un)" ]]; then
            log "cannot stop $datadir: owned by $owner"
            return 1
        fi
        if as_user "$owner" "$PG_BIN/pg_ctl" status -D "$datadir" >/dev/null 2>&1; then
            log "stopping cluster in $datadir"
            as_user "$owner" "$PG_BIN/pg_ctl" stop -D "$datadir" -m fast -w -t 60 >/dev/null ||
                as_user "$owner" "$PG_BIN/pg_ctl" stop -D "$datadir" -m immediate -w >/dev/null ||
                true
        fi
    fi
    if [[ "$(basename "$parent")" == "$PREFIX"* ]]; then
        rm -rf -- "$parent"
    fi
}

# Stop clusters left behind by earlier runs of this script that use port $1.
stop_leftovers_on_port() {
    local port="$1" pidfile datadir leftover_port
    for pidfile in /tmp/"$PREFIX"*/data/postmaster.pid "${TMPDIR:-/tmp}"/"$PREFIX"*/data/postmaster.pid; do
        [[ -f "$pidfile" ]] || continue
        leftover_port="$(sed -n 4p "$pidfile" 2>/dev/null || true)"
        if [[ "$leftover_port" == "$port" ]]; then
            datadir="$(dirname "$pidfile")"
            log "found leftover cluster on port $port in $datadir"
            stop_datadir "$datadir" || true
        fi
    done
}

cmd_start() {
    local state_file
    state_file="$(realpath -m -- "${1:-$DEFAULT_STATE}")"
    [[ -x "$PG_BIN/initdb" && -x "$PG_BIN/pg_ctl" ]] || die "no PostgreSQL binaries in $PG_BIN"

    # A cluster recorded in the state file by an earlier run is stopped first.
    if [[ -f "$state_file" ]]; then
        stop_datadir "$(cat "$state_file")" || true
        rm -f -- "$state_file"
    fi

    local user base tmp datadir sockdir logfile port="" candidate
    user="$(server_user)"
    base="${TMPDIR:-/tmp}"
    if is_root && [[ "$base" != /tmp ]]; then
        base=/tmp # the server user must be able to traverse the path
    fi
    tmp="$(mktemp -d "$base/${PREFIX}XXXXXX")"
    datadir="$tmp/data"
    sockdir="$tmp/socket"
    logfile="$tmp/postgres.log"
    mkdir -p "$sockdir"
    chmod 700 "$tmp"
    if is_root; then
        chown -R "$user:" "$tmp"
    fi
    cd "$tmp" # the server user may not be able to read the caller's cwd

    log "initdb $datadir (user $user, $("$PG_BIN/pg_ctl" --version))"
    # --no-sync only skips initdb's own final fsync; the server runs with fsync=on.
    if ! as_user "$user" "$PG_BIN/initdb" -D "$datadir" -A trust -U "$user" -E UTF8 \
        --locale=C --no-sync >"$tmp/initdb.log" 2>&1; then
        cat "$tmp/initdb.log" >&2
        rm -rf -- "$tmp"
        die "initdb failed"
    fi
    cat >>"$datadir/postgresql.conf" <<EOF

# --- added by scripts/ci-postgres15.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockdir'
max_connections = 200
# The pgtasks doctor tests provoke a prepared transaction.
max_prepared_transactions = 10
fsync = on
synchronous_commit = on
full_page_writes = on
EOF

    for ((candidate = FIRST_PORT; candidate < FIRST_PORT + PORT_ATTEMPTS; candidate++)); do
        stop_leftovers_on_port "$candidate"
        if port_in_use "$candidate"; then
            log "port $candidate is in use, trying the next one"
            continue
        fi
        if as_user "$user" "$PG_BIN/pg_ctl" start -D "$datadir" -l "$logfile" -w -t 60 \
            -o "-p $candidate" >/dev/null; then
            port="$candidate"
            break
        fi
        if grep -q -i -E "could not bind|address already in use" "$logfile" 2>/dev/null; then
            log "port $candidate was taken while starting, trying the next one"
            continue
        fi
        cat "$logfile" >&2 || true
        stop_datadir "$datadir" || true
        die "pg_ctl start failed"
    done
    if [[ -z "$port" ]]; then
        stop_datadir "$datadir" || true
        die "no free port in $FIRST_PORT..$((FIRST_PORT + PORT_ATTEMPTS - 1))"
    fi
    echo "port = $port" >>"$datadir/postgresql.conf" # so a plain pg_ctl restart keeps it

    if [[ -x "$PG_BIN/pg_isready" ]] && ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 30; then
        cat "$logfile" >&2 || true
        stop_datadir "$datadir" || true
        die "server started but does not accept connections on 127.0.0.1:$port"
    fi

    echo "$datadir" >"$state_file"
    log "running: data dir $datadir, log $logfile, state file $state_file"
    echo "STATE_FILE=$state_file"
    echo "DSN=postgresql://$user@127.0.0.1:$port/postgres"
}

cmd_stop() {
    local target="${1:-$DEFAULT_STATE}" datadir
    if [[ -d "$target" ]]; then
        datadir="$target"
    elif [[ -f "$target" ]]; then
        datadir="$(cat "$target")"
        rm -f -- "$target"
    else
        log "nothing to stop ($target does not exist)"
        return 0
    fi
    [[ -n "$datadir" ]] || return 0
    cd /
    stop_datadir "$datadir"
    log "stopped"
}

case "${1:-}" in
start)
    shift
    cmd_start "$@"
    ;;
stop)
    shift
    cmd_stop "$@"
    ;;
*)
    echo "usage: $0 start [STATE_FILE] | stop [STATE_FILE|DATA_DIR]" >&2
    exit 2
    ;;
esac
