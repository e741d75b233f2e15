#!/usr/bin/env bash
# The one test command, for a fresh Debian machine as for one already set up:
# installs (apt-get) or starts what the tests need, then runs the whole suite.
#
#   scripts/test.sh                      services, then cargo nextest run --locked --no-fail-fast
#   scripts/test.sh --test worker lock   the same, with arguments passed on to nextest
#   scripts/test.sh --services-only      services only (.ci/run starts with this)
#
# What it installs when missing (apt-get, as root or through sudo):
#   PostgreSQL    started on 127.0.0.1:5432, local TCP connections trusted
#   Redis         redis-server started on 127.0.0.1:6379 (the fault suite
#                 also starts redis-server processes of its own)
#   faketime      the fault suite runs a replica under a shifted clock
#   pgbouncer     tests/faults/pgbouncer.rs starts one in transaction mode
#   docker-compose  tests and CI lint docker-compose.yml (`config`; no engine)
#   prometheus    for promtool (alert rules and the scrape configuration)
#   curl, openssl the docs tests run the bounce webhook examples
#   postfix       tests start Postfix instances of their own (own config, queue
#                 and port on loopback; the system's Postfix is never started)
#   chromium, chromium-driver  tests/console drives the console in headless Chromium
#   a C compiler  (gcc, libc6-dev) to link Rust code
#   cargo-nextest with `cargo install --locked`
# Rust itself (cargo) must be there already: https://rustup.rs
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s ==\n' "$*"; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  SUDO="sudo"
fi

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    return
  fi
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    log "installing PostgreSQL"
    apt_install postgresql
    # Trust local TCP connections, as the tests (and this machine) expect.
    for hba in /etc/postgresql/*/main/pg_hba.conf; do
      $SUDO sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
    done
  fi
  log "starting PostgreSQL"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 60); do
    pg_isready -h 127.0.0.1 -p 5432 -q && return
    sleep 0.5
  done
  echo "PostgreSQL did not start" >&2
  exit 1
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    return
  fi
  if ! command -v redis-server >/dev/null; then
    log "installing Redis"
    apt_install redis-server
  fi
  log "starting Redis"
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 60); do
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return
    sleep 0.5
  done
  echo "Redis did not start" >&2
  exit 1
}

ensure_tools() {
  if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust first (https://rustup.rs)" >&2
    exit 1
  fi
  command -v cc >/dev/null || { log "installing a C compiler"; apt_install gcc libc6-dev; }
  # The fault suite runs one replica under faketime and starts its own redis-server.
  command -v faketime >/dev/null || { log "installing faketime"; apt_install faketime; }
  command -v redis-server >/dev/null || { log "installing redis-server"; apt_install redis-server; }
  # tests/faults/pgbouncer.rs starts its own PgBouncer (transaction mode) on a free port.
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || { log "installing pgbouncer"; apt_install pgbouncer; }
  # Lints docker-compose.yml; `config` needs no Docker engine.
  command -v docker-compose >/dev/null || { log "installing docker-compose"; apt_install --no-install-recommends docker-compose; }
  # promtool checks and tests the alert rules.
  command -v promtool >/dev/null || { log "installing prometheus (promtool)"; apt_install --no-install-recommends prometheus; }
  # tests/docs runs the bounce webhook examples (curl; openssl signs).
  command -v curl >/dev/null || { log "installing curl"; apt_install --no-install-recommends curl; }
  command -v openssl >/dev/null || { log "installing openssl"; apt_install --no-install-recommends openssl; }
  # Tests run Postfix instances of their own (tests/common/postfix.rs); the
  # package's own instance stays unconfigured and stopped.
  if [ ! -x /usr/sbin/postfix ]; then
    log "installing postfix"
    echo "postfix postfix/main_mailer_type select No configuration" | $SUDO debconf-set-selections
    apt_install --no-install-recommends postfix
  fi
  # tests/console drives the operator console in headless Chromium over WebDriver.
  command -v chromedriver >/dev/null || { log "installing chromium and chromium-driver"; apt_install --no-install-recommends chromium chromium-driver; }
  command -v pdftotext >/dev/null || { log "installing poppler-utils (pdftotext, pdfinfo: the letters' tests)"; apt_install --no-install-recommends poppler-utils; }
  command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
}

services_only=0
if [ "${1:-}" = "--services-only" ]; then
  services_only=1
  shift
fi

log "services"
ensure_postgres
ensure_redis
ensure_tools

if [ "$services_only" = 1 ]; then
  exit 0
fi

log "tests"
exec cargo nextest run --locked --no-fail-fast "$@"
