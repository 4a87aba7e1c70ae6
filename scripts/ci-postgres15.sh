#!/usr/bin/env bash
# Throwaway PostgreSQL 15 servers for CI (Debian's postgresql-15 binaries and pgbouncer).
#
#   scripts/ci-postgres15.sh start [STATE_FILE]
#       initdb + start a fresh cluster in a new temp dir, listening on 127.0.0.1 only
#       (or on $PGTASKS_CI_PG_HOST).
#       Progress goes to stderr; stdout ends with the line
#           DSN=postgresql://<user>@127.0.0.1:<port>/postgres
#       The data directory path is written to STATE_FILE.
#   scripts/ci-postgres15.sh start-replica PRIMARY_STATE [STATE_FILE]
#       a streaming replica (hot standby) of the cluster PRIMARY_STATE names, made with
#       pg_basebackup -R in a new temp dir on the next free port; waits until it streams.
#       stdout ends with DSN=... as for start.
#   scripts/ci-postgres15.sh start-pgbouncer PRIMARY_STATE [STATE_FILE]
#       PgBouncer (Debian's pgbouncer: apt-get install pgbouncer) in front of that cluster:
#       pool_mode = transaction, 127.0.0.1 and the next free port, trust auth, no startup
#       option let through (as a default install). stdout ends with DSN=...
#   scripts/ci-postgres15.sh crash STATE_FILE | restart STATE_FILE | pid STATE_FILE
#       stop that cluster with pg_ctl stop -m immediate keeping its data directory; start
#       it again (crash recovery first); print its postmaster's pid.
#   scripts/ci-postgres15.sh promote STATE_FILE
#       promote the replica a state file names (pg_ctl promote -w): it leaves recovery
#       and accepts writes (a failover done by hand, as an HA manager would do it).
#   scripts/ci-postgres15.sh stop [STATE_FILE | DATA_DIR]
#       stop what a state file names (a cluster, a replica or a PgBouncer) and delete its
#       temp dir (a no-op when it is already gone).
#
# STATE_FILE defaults to $PGTASKS_CI_PG_STATE or ${TMPDIR:-/tmp}/pgtasks-ci-postgres15.state
# for start; start-replica and start-pgbouncer default to that name with -replica or
# -pgbouncer before .state.
#
# Run as root (the CI case), the servers run as the system user "pgtasks-ci" (created with
# useradd --system when missing; falls back to "postgres"); otherwise as the current user.
# Durability settings stay at their defaults (fsync=on, synchronous_commit=on); the server
# gets max_connections=300, wal_keep_size=512MB (a replica that falls behind catches up)
# and its unix socket inside the temp dir.
#
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), PGTASKS_CI_PG_PORT (first port
# tried, default 54315), PGTASKS_CI_PG_HOST (the address `start` listens on, default
# 127.0.0.1; replicas and PgBouncer stay on 127.0.0.1), PGBOUNCER (default: pgbouncer on PATH, else /usr/sbin/pgbouncer).
# A leftover server of an earlier run of this script on a port it tries is stopped first;
# a port held by anything else is skipped.
set -euo pipefail

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
FIRST_PORT="${PGTASKS_CI_PG_PORT:-54315}"
# The address a cluster of cmd_start listens on (127.0.0.2, 127.0.0.3 … are other "hosts"
# of the loopback network: a second cluster of the multi-store tests).
HOST="${PGTASKS_CI_PG_HOST:-127.0.0.1}"
PORT_ATTEMPTS=20
CI_USER="pgtasks-ci"
PREFIX="pgtasks-ci-pg15."
DEFAULT_STATE="${PGTASKS_CI_PG_STATE:-${TMPDIR:-/tmp}/pgtasks-ci-postgres15.state}"
PGBOUNCER="${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}"

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

# Something accepts TCP connections on $HOST:$1 (the address cmd_start listens on).
# A port is in use when something answers on it, or when it cannot be bound: a port in
# the kernel's ephemeral range can be the local end of a client's connection (or of one
# in TIME_WAIT) that answers nothing, and a server then fails with "Address already in
# use".
port_in_use() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null && return 0
    ! python3 -c 'import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))' "$HOST" "$1" 2>/dev/null
}

# Stop the PgBouncer whose temp dir is $1 and remove that dir.
stop_pgbouncer() {
    local dir="$1" pid attempt
    if [[ -f "$dir/pgbouncer.pid" ]]; then
        pid="$(cat "$dir/pgbouncer.pid" 2>/dev/null || true)"
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            log "stopping pgbouncer (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            for ((attempt = 0; attempt < 100; attempt++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    if [[ "$(basename "$dir")" == "${PREFIX}pgbouncer."* ]]; then
        rm -rf -- "$dir"
    fi
}

# Stop the cluster in data dir $1 (if running) and remove its temp dir when it is ours
# (a PgBouncer's dir: stop that PgBouncer).
stop_datadir() {
    local datadir="$1" owner parent
    if [[ -f "$datadir/pgbouncer.ini" ]]; then
        stop_pgbouncer "$datadir"
        return
    fi
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
listen_addresses = '$HOST'
unix_socket_directories = '$sockdir'
max_connections = 300
# The pgtasks doctor tests provoke a prepared transaction.
max_prepared_transactions = 10
# A streaming replica (start-replica) that falls behind catches up from the kept WAL.
wal_keep_size = 512MB
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

    if [[ -x "$PG_BIN/pg_isready" ]] && ! "$PG_BIN/pg_isready" -q -h "$HOST" -p "$port" -t 30; then
        cat "$logfile" >&2 || true
        stop_datadir "$datadir" || true
        die "server started but does not accept connections on $HOST:$port"
    fi

    echo "$datadir" >"$state_file"
    log "running: data dir $datadir, log $logfile, state file $state_file"
    echo "STATE_FILE=$state_file"
    echo "DSN=postgresql://$user@$HOST:$port/postgres"
}

# The data dir a state file (or a data dir) names.
read_state() {
    local target="$1"
    if [[ -d "$target" ]]; then
        echo "$target"
    elif [[ -f "$target" ]]; then
        cat "$target"
    else
        die "no such state file or data dir: $target"
    fi
}

# The port the running cluster in data dir $1 listens on (postmaster.pid, line 4).
cluster_port() {
    sed -n 4p "$1/postmaster.pid"
}

# The first free port from $1 on (a leftover server of this script on it is stopped first).
free_port_from() {
    local candidate
    for ((candidate = $1; candidate < $1 + PORT_ATTEMPTS; candidate++)); do
        stop_leftovers_on_port "$candidate"
        if ! port_in_use "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    die "no free port in $1..$(($1 + PORT_ATTEMPTS - 1))"
}

# A new temp dir for a server run as $1 (the server user must be able to enter it).
server_tmpdir() {
    local user="$1" prefix="$2" base tmp
    base="${TMPDIR:-/tmp}"
    if is_root && [[ "$base" != /tmp ]]; then
        base=/tmp
    fi
    tmp="$(mktemp -d "$base/${prefix}XXXXXX")"
    chmod 700 "$tmp"
    if is_root; then
        chown "$user:" "$tmp"
    fi
    echo "$tmp"
}

cmd_start_replica() {
    local primary_state="${1:-$DEFAULT_STATE}" state_file primary user primary_port
    state_file="$(realpath -m -- "${2:-${DEFAULT_STATE%.state}-replica.state}")"
    primary="$(read_state "$primary_state")"
    [[ -f "$primary/postmaster.pid" ]] || die "the primary in $primary is not running"
    user="$(stat -c %U "$primary")"
    primary_port="$(cluster_port "$primary")"
    if [[ -f "$state_file" ]]; then
        stop_datadir "$(cat "$state_file")" || true
        rm -f -- "$state_file"
    fi

    local tmp datadir sockdir logfile port attempt status=""
    tmp="$(server_tmpdir "$user" "$PREFIX")"
    datadir="$tmp/data"
    sockdir="$tmp/socket"
    logfile="$tmp/postgres.log"
    as_user "$user" mkdir -p "$sockdir"
    cd "$tmp"
    log "pg_basebackup of 127.0.0.1:$primary_port into $datadir (user $user)"
    if ! as_user "$user" "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U "$user" \
        -D "$datadir" -X stream -R -c fast --no-sync >"$tmp/basebackup.log" 2>&1; then
        cat "$tmp/basebackup.log" >&2
        rm -rf -- "$tmp"
        die "pg_basebackup failed"
    fi
    port="$(free_port_from $((primary_port + 1)))"
    # The copied postgresql.conf is the primary's: these lines come last, so they win.
    {
        echo ""
        echo "# --- added by scripts/ci-postgres15.sh start-replica ---"
        echo "unix_socket_directories = '$sockdir'"
        echo "port = $port"
        echo "hot_standby = on"
    } >>"$datadir/postgresql.conf"
    if ! as_user "$user" "$PG_BIN/pg_ctl" start -D "$datadir" -l "$logfile" -w -t 60 >/dev/null; then
        cat "$logfile" >&2 || true
        stop_datadir "$datadir" || true
        die "the replica did not start"
    fi
    for ((attempt = 0; attempt < 300; attempt++)); do
        status="$("$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -XAtq \
            -c "SELECT status FROM pg_stat_wal_receiver" 2>/dev/null || true)"
        [[ "$status" == streaming ]] && break
        sleep 0.1
    done
    if [[ "$status" != streaming ]]; then
        cat "$logfile" >&2 || true
        stop_datadir "$datadir" || true
        die "the replica does not stream from the primary"
    fi
    echo "$datadir" >"$state_file"
    log "replica streaming: data dir $datadir, log $logfile, state file $state_file"
    echo "STATE_FILE=$state_file"
    echo "DSN=postgresql://$user@127.0.0.1:$port/postgres"
}

cmd_start_pgbouncer() {
    local primary_state="${1:-$DEFAULT_STATE}" state_file primary user primary_port
    state_file="$(realpath -m -- "${2:-${DEFAULT_STATE%.state}-pgbouncer.state}")"
    [[ -x "$PGBOUNCER" ]] || die "no pgbouncer at $PGBOUNCER (apt-get install pgbouncer)"
    primary="$(read_state "$primary_state")"
    [[ -f "$primary/postmaster.pid" ]] || die "the primary in $primary is not running"
    user="$(stat -c %U "$primary")"
    primary_port="$(cluster_port "$primary")"
    if [[ -f "$state_file" ]]; then
        stop_datadir "$(cat "$state_file")" || true
        rm -f -- "$state_file"
    fi

    local dir port attempt
    dir="$(server_tmpdir "$user" "${PREFIX}pgbouncer.")"
    port="$(free_port_from $((primary_port + 10)))"
    {
        echo "; written by scripts/ci-postgres15.sh start-pgbouncer"
        echo "[databases]"
        echo "* = host=127.0.0.1 port=$primary_port"
        echo ""
        echo "[pgbouncer]"
        echo "listen_addr = 127.0.0.1"
        echo "listen_port = $port"
        echo "unix_socket_dir ="
        echo "auth_type = trust"
        echo "auth_file = $dir/userlist.txt"
        echo "admin_users = $user"
        echo "pool_mode = transaction"
        echo "max_client_conn = 1000"
        echo "default_pool_size = 40"
        echo "logfile = $dir/pgbouncer.log"
        echo "pidfile = $dir/pgbouncer.pid"
    } >"$dir/pgbouncer.ini"
    printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
    if is_root; then
        chown "$user:" "$dir/pgbouncer.ini" "$dir/userlist.txt"
    fi
    log "starting $("$PGBOUNCER" --version | head -n 1) on 127.0.0.1:$port, pool_mode = transaction"
    if ! (cd "$dir" && as_user "$user" "$PGBOUNCER" -d "$dir/pgbouncer.ini") >"$dir/start.log" 2>&1; then
        cat "$dir/start.log" "$dir/pgbouncer.log" >&2 || true
        stop_pgbouncer "$dir"
        die "pgbouncer did not start"
    fi
    for ((attempt = 0; attempt < 100; attempt++)); do
        if "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -XAtq -c "SELECT 1" \
            >/dev/null 2>&1; then
            break
        fi
        sleep 0.1
    done
    if ! "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -XAtq -c "SELECT 1" >/dev/null; then
        cat "$dir/pgbouncer.log" >&2 || true
        stop_pgbouncer "$dir"
        die "pgbouncer does not serve connections on 127.0.0.1:$port"
    fi
    echo "$dir" >"$state_file"
    log "pgbouncer running: dir $dir, log $dir/pgbouncer.log, state file $state_file"
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

# A crash of the cluster a state file names: pg_ctl stop -m immediate (no shutdown
# checkpoint, sessions cut), its data directory kept for `restart`.
cmd_crash() {
    local datadir owner
    datadir="$(read_state "${1:-$DEFAULT_STATE}")"
    owner="$(stat -c %U "$datadir")"
    cd /
    as_user "$owner" "$PG_BIN/pg_ctl" stop -D "$datadir" -m immediate -w >/dev/null
    log "stopped $datadir (immediate)"
}

# Start again a cluster `crash` stopped (crash recovery runs first), on its own port.
cmd_restart() {
    local datadir owner
    datadir="$(read_state "${1:-$DEFAULT_STATE}")"
    owner="$(stat -c %U "$datadir")"
    cd /
    as_user "$owner" "$PG_BIN/pg_ctl" start -D "$datadir" -l "$(dirname "$datadir")/postgres.log" \
        -w -t 120 >/dev/null
    log "restarted $datadir"
}

# A failover by hand: the replica a state file names leaves recovery (pg_ctl promote
# waits until it accepts writes).
cmd_promote() {
    local datadir owner
    datadir="$(read_state "${1:-$DEFAULT_STATE}")"
    owner="$(stat -c %U "$datadir")"
    cd /
    as_user "$owner" "$PG_BIN/pg_ctl" promote -D "$datadir" -w -t 60 >/dev/null
    log "promoted $datadir"
}

# The postmaster's pid of the cluster a state file names (first line of postmaster.pid).
cmd_pid() {
    head -n 1 "$(read_state "${1:-$DEFAULT_STATE}")/postmaster.pid"
}

case "${1:-}" in
crash)
    shift
    cmd_crash "$@"
    ;;
restart)
    shift
    cmd_restart "$@"
    ;;
pid)
    shift
    cmd_pid "$@"
    ;;
promote)
    shift
    cmd_promote "$@"
    ;;
start)
    shift
    cmd_start "$@"
    ;;
start-replica)
    shift
    cmd_start_replica "$@"
    ;;
start-pgbouncer)
    shift
    cmd_start_pgbouncer "$@"
    ;;
stop)
    shift
    cmd_stop "$@"
    ;;
*)
    echo "usage: $0 start [STATE_FILE] | start-replica PRIMARY_STATE [STATE_FILE]" \
        "| start-pgbouncer PRIMARY_STATE [STATE_FILE] | stop [STATE_FILE|DATA_DIR]" \
        "| crash STATE_FILE | restart STATE_FILE | pid STATE_FILE | promote STATE_FILE" >&2
    exit 2
    ;;
esac
