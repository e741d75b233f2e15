#!/usr/bin/env bash
# The docker compose demo without Docker: N worker replicas against the local
# PostgreSQL and Redis, mailing a local SMTP sink, each invoice that owes a reminder
# reminded exactly once.
#
#   scripts/replicas.sh [N]            # N replicas (default 3); Ctrl-C to stop
#   DURATION=30 scripts/replicas.sh 3  # stop by itself after 30 seconds
#
# What it does: builds the binary and the example SMTP sink, drops and
# recreates a demo database, runs `migrate` and the same `seed` as compose,
# starts the sink and N `invoice-reminder run` replicas (replica-1..N, log
# lines prefixed with the name), and on Ctrl-C / SIGTERM / DURATION stops the
# replicas (SIGTERM, then waits for their graceful shutdown), stops the sink,
# and runs `invoice-reminder audit`, whose exit code this script exits with
# (1 if the audit passed but a replica exited non-zero). CI runs it for 20 s.
#
# Environment (all optional):
#   DURATION      seconds to run before stopping by itself (default: until Ctrl-C)
#   PROFILE       cargo profile, "debug" or "release" (default: debug)
#   DEMO_DB       demo database, dropped and recreated (default: invoice_reminder_demo)
#   PGHOST PGPORT PGUSER PGPASSWORD
#                 PostgreSQL, as for psql (default: 127.0.0.1, 5432, postgres)
#   REDIS_HOST REDIS_PORT
#                 Redis (default: 127.0.0.1, 6379)
#   SMTP_PORT     port of the SMTP sink (default: the first free port from 2525)
#   CRON          the schedule (default: "*/5 * * * * *", every 5 seconds)
#   LOCK_KEY      the Redis lock key (default: one of this demo run's own)
# Any INVOICE_REMINDER__<SECTION>__<KEY> already set is passed on, unless the
# demo sets that key itself (see the list below).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

N=${1:-3}
DURATION=${DURATION:-}
PROFILE=${PROFILE:-debug}
DEMO_DB=${DEMO_DB:-invoice_reminder_demo}
export PGHOST=${PGHOST:-127.0.0.1}
export PGPORT=${PGPORT:-5432}
export PGUSER=${PGUSER:-postgres}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
CRON=${CRON:-"*/5 * * * * *"}
LOCK_KEY=${LOCK_KEY:-"invoice-reminder-demo:$$:lock"}
# The same demo data as the compose `seed` service.
SEED_ARGS=(--customers 50 --invoices 500 --overdue-pct 30)

say() { printf '==> %s\n' "$*"; }
die() {
  printf 'replicas.sh: %s\n' "$*" >&2
  exit 2
}

[[ $N =~ ^[1-9][0-9]*$ ]] || die "usage: $0 [N]  (N: number of replicas, at least 1)"
[[ -z $DURATION || $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a number of seconds"
[[ $DEMO_DB =~ ^[a-z_][a-z0-9_]*$ ]] || die "DEMO_DB must be a plain lower-case name"
case $PROFILE in
  debug) CARGO_PROFILE_ARGS=() ;;
  release) CARGO_PROFILE_ARGS=(--release) ;;
  *) die "PROFILE must be debug or release" ;;
esac
command -v psql >/dev/null || die "psql not found (apt-get install postgresql-client)"

# True if something accepts connections on host $1 port $2.
listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Copies stdin to stdout, each line prefixed with "[name] ". Ignores Ctrl-C:
# it must keep printing until the process it reads from has shut down.
prefix() {
  trap '' INT
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%-11s %s\n' "[$1]" "$line"
  done
}

REPLICAS=() # pids of the replicas, in order
PRINTERS=() # pids of their prefix readers
SINK_PID=
SINK_PRINTER=

# Starts "$@" in a session of its own (so a Ctrl-C in the terminal reaches
# only this script, which then stops everything in order), its output
# prefixed with $1. Sets STARTED to its pid.
start_prefixed() {
  local name=$1 fd
  shift
  exec {fd}> >(prefix "$name")
  PRINTED=$!
  setsid "$@" >&"$fd" 2>&1 &
  STARTED=$!
  exec {fd}>&-
}

# On any exit (an error, or a second Ctrl-C during start-up), leave nothing
# running: the children have sessions of their own and would outlive us.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${REPLICAS[@]}" $SINK_PID; do
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

say "building invoice-reminder and the example SMTP sink ($PROFILE)"
cargo build --quiet "${CARGO_PROFILE_ARGS[@]}" --bin invoice-reminder --example smtp_sink
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
  grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
BIN=$TARGET_DIR/$PROFILE/invoice-reminder
SINK=$TARGET_DIR/$PROFILE/examples/smtp_sink
[[ -x $BIN && -x $SINK ]] || die "built binaries not found under $TARGET_DIR/$PROFILE"

listening "$REDIS_HOST" "$REDIS_PORT" || die "Redis is not reachable on $REDIS_HOST:$REDIS_PORT"

if [[ -z ${SMTP_PORT:-} ]]; then
  SMTP_PORT=2525
  while listening 127.0.0.1 "$SMTP_PORT"; do
    SMTP_PORT=$((SMTP_PORT + 1))
  done
fi

# The demo's settings: config/default.toml with the same differences as
# config/docker.toml (schedule, lock timing), pointed at local services.
DATABASE_URL="postgres://$PGUSER${PGPASSWORD:+:$PGPASSWORD}@$PGHOST:$PGPORT/$DEMO_DB"
export INVOICE_REMINDER_CONFIG=${INVOICE_REMINDER_CONFIG:-$ROOT/config/default.toml}
export INVOICE_REMINDER__DATABASE__URL=$DATABASE_URL
export INVOICE_REMINDER__REDIS__URL="redis://$REDIS_HOST:$REDIS_PORT"
export INVOICE_REMINDER__SCHEDULE__CRON=$CRON
export INVOICE_REMINDER__LOCK__KEY=$LOCK_KEY
export INVOICE_REMINDER__LOCK__TTL=10s
export INVOICE_REMINDER__LOCK__RENEW_EVERY=3s
export INVOICE_REMINDER__LOCK__MIN_HOLD=2s
export INVOICE_REMINDER__SMTP__HOST=127.0.0.1
export INVOICE_REMINDER__SMTP__PORT=$SMTP_PORT
export INVOICE_REMINDER__SHUTDOWN__TIMEOUT=20s

say "recreating database $DEMO_DB on $PGHOST:$PGPORT"
psql -X -q -v ON_ERROR_STOP=1 -d postgres \
  -c "DROP DATABASE IF EXISTS $DEMO_DB WITH (FORCE)" \
  -c "CREATE DATABASE $DEMO_DB" ||
  die "cannot recreate $DEMO_DB as $PGUSER on $PGHOST:$PGPORT (is PostgreSQL running?)"
"$BIN" migrate
"$BIN" seed "${SEED_ARGS[@]}"

say "starting the SMTP sink on 127.0.0.1:$SMTP_PORT"
start_prefixed smtp-sink "$SINK" "$SMTP_PORT"
SINK_PID=$STARTED
SINK_PRINTER=$PRINTED
for _ in $(seq 1 100); do
  listening 127.0.0.1 "$SMTP_PORT" && break
  kill -0 "$SINK_PID" 2>/dev/null || die "the SMTP sink did not start (port $SMTP_PORT taken?)"
  sleep 0.1
done
listening 127.0.0.1 "$SMTP_PORT" || die "the SMTP sink is not listening on $SMTP_PORT"

STOP=
trap 'STOP=1' INT TERM

say "starting $N replicas (schedule \"$CRON\", lock key $LOCK_KEY)"
for i in $(seq 1 "$N"); do
  start_prefixed "replica-$i" env INVOICE_REMINDER__REPLICA_ID="replica-$i" "$BIN" run
  REPLICAS+=("$STARTED")
  PRINTERS+=("$PRINTED")
done
if [[ -n $DURATION ]]; then
  say "running for ${DURATION}s (Ctrl-C stops earlier)"
else
  say "running; Ctrl-C stops the replicas and runs the audit"
fi

any_replica_alive() {
  local pid
  for pid in "${REPLICAS[@]}"; do
    kill -0 "$pid" 2>/dev/null && return 0
  done
  return 1
}

SECONDS=0
while [[ -z $STOP ]] && any_replica_alive; do
  [[ -n $DURATION ]] && ((SECONDS >= DURATION)) && break
  # `wait` returns as soon as a trapped signal arrives; `sleep` alone would not.
  sleep 1 &
  wait $! || true
done

say "stopping the replicas (SIGTERM; Ctrl-C again stops them at once)"
trap 'kill -TERM "${REPLICAS[@]}" 2>/dev/null || true' INT TERM
kill -TERM "${REPLICAS[@]}" 2>/dev/null || true
FAILED=0
for i in "${!REPLICAS[@]}"; do
  status=0
  wait "${REPLICAS[$i]}" || status=$?
  # A trapped signal interrupts `wait` (status > 128): wait again.
  while kill -0 "${REPLICAS[$i]}" 2>/dev/null; do
    status=0
    wait "${REPLICAS[$i]}" || status=$?
  done
  ((status == 0)) || FAILED=1
  say "replica-$((i + 1)) exited with status $status"
done
wait "${PRINTERS[@]}" 2>/dev/null || true
REPLICAS=()

say "stopping the SMTP sink"
kill -TERM "$SINK_PID" 2>/dev/null || true
wait "$SINK_PID" 2>/dev/null || true
wait "$SINK_PRINTER" 2>/dev/null || true
SINK_PID=

say "work done by each replica"
psql -X -q -d "$DEMO_DB" -c "
  SELECT r.replica_id, count(DISTINCT r.id) AS ticks_worked, count(m.id) AS reminders_sent
    FROM invoice_reminder.job_runs r
    LEFT JOIN invoice_reminder.reminders m ON m.run_id = r.id AND m.status = 'sent'
   GROUP BY r.replica_id ORDER BY r.replica_id" || true

say "invoice-reminder audit"
AUDIT=0
"$BIN" audit || AUDIT=$?
say "audit exit code: $AUDIT"
# This run's lock key and fencing counter are of no further use.
if command -v redis-cli >/dev/null; then
  redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" DEL "$LOCK_KEY" "$LOCK_KEY:fence" >/dev/null || true
fi
if ((FAILED != 0)); then
  say "a replica exited with a non-zero status (see above)"
  ((AUDIT != 0)) || AUDIT=1
fi
exit "$AUDIT"
