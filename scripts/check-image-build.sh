#!/usr/bin/env bash
# Builds the image's binary the way `docker build` would, without Docker.
#
# 1. The build context: exactly the files .dockerignore lets through. The
#    file must be a plain allowlist ("*", then one "!name" per line).
# 2. The Dockerfile's builder stage, replayed in a scratch root
#    (target/image-build/root): WORKDIR, ENV, COPY from the context, RUN
#    with cargo offline (CARGO_NET_OFFLINE) and --mount flags dropped. The
#    scratch target/ is a link to this repository's target directory, so a
#    second run (or CI after a release build) is incremental.
# 3. The runtime stage's COPY sources exist (from the builder's root or the
#    context), and the binary it copies runs.
# 4. With a Docker engine and the base images present, `docker build` too;
#    otherwise one line saying why it was skipped.
#
# Exit 0 when the image's build step works from this checkout; non-zero,
# with the failing step, otherwise. Needs no network and no Docker engine.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dockerfile=${DOCKERFILE:-$repo/Dockerfile}
ignore=$repo/.dockerignore
work=$repo/target/image-build
context=$work/context
root=$work/root
shared_target=${CARGO_TARGET_DIR:-$repo/target}

fail() { echo "check-image-build: $*" >&2; exit 1; }
say() { echo "check-image-build: $*"; }

# --- 1. the build context --------------------------------------------------
[ -f "$ignore" ] || fail ".dockerignore is missing: the whole directory (target/, .git/) would be sent"
mapfile -t rules < <(sed -e 's/[[:space:]]*$//' -e '/^[[:space:]]*#/d' -e '/^$/d' "$ignore")
[ "${rules[0]:-}" = "*" ] || fail ".dockerignore must start with '*' (an allowlist), found '${rules[0]:-}'"
rm -rf "$work"
mkdir -p "$context" "$root"
for rule in "${rules[@]:1}"; do
  [[ $rule == '!'* ]] || fail ".dockerignore: only '!name' lines may follow '*', found '$rule'"
  name=${rule#!}
  name=${name%/}
  [[ $name == */* || $name == *[\*\?\[]* || -z $name ]] &&
    fail ".dockerignore: '$rule' is not a plain top-level name"
  if [ -e "$repo/$name" ]; then
    cp -a "$repo/$name" "$context/"
  fi
done
say "build context: $(cd "$context" && ls -A | tr '\n' ' ')"

# --- 2. the Dockerfile, one instruction per (joined) line -------------------
mapfile -t instructions < <(
  sed -e '/^[[:space:]]*#/d' "$dockerfile" |
    awk '{ if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 " " } else { print buf $0; buf = "" } }' |
    sed -e 's/^[[:space:]]*//' -e '/^$/d'
)

declare -A args=()
expand() { # ${NAME} and $NAME from ARG defaults
  local text=$1 name
  for name in "${!args[@]}"; do
    text=${text//\$\{$name\}/${args[$name]}}
    text=${text//\$$name/${args[$name]}}
  done
  printf '%s' "$text"
}

stage=""
builder=""
workdir=/
base_images=()
runtime_copies=()
for line in "${instructions[@]}"; do
  keyword=${line%% *}
  rest=${line#"$keyword"}
  rest=${rest# }
  case ${keyword^^} in
    ARG)
      if [[ $rest == *=* ]]; then args[${rest%%=*}]=${rest#*=}; fi
      ;;
    FROM)
      read -r -a from <<<"$(expand "$rest")"
      base_images+=("${from[0]}")
      stage=${from[2]:-stage${#base_images[@]}}
      [ -z "$builder" ] && builder=$stage
      workdir=/
      ;;
    WORKDIR)
      [ "$stage" = "$builder" ] || continue
      case $rest in /*) workdir=$rest ;; *) workdir=$workdir/$rest ;; esac
      mkdir -p "$root$workdir"
      ;;
    ENV)
      [ "$stage" = "$builder" ] || continue
      export "${rest%% *}=${rest#* }" 2>/dev/null || export "$rest"
      ;;
    COPY)
      read -r -a words <<<"$rest"
      from_stage=""
      while [[ ${words[0]} == --* ]]; do
        [[ ${words[0]} == --from=* ]] && from_stage=${words[0]#--from=}
        words=("${words[@]:1}")
      done
      dest=${words[-1]}
      sources=("${words[@]:0:${#words[@]}-1}")
      if [ "$stage" != "$builder" ]; then
        runtime_copies+=("$from_stage|${sources[*]}")
        continue
      fi
      case $dest in /*) target_dir=$root$dest ;; *) target_dir=$root$workdir/$dest ;; esac
      for src in "${sources[@]}"; do
        [ -e "$context/$src" ] || fail "COPY $src: not in the build context (add '!$src' to .dockerignore)"
        if [ -d "$context/$src" ]; then # Docker copies a directory's contents
          mkdir -p "$target_dir"
          cp -a "$context/$src/." "$target_dir/"
        elif [[ $dest == */ || $dest == . || ${#sources[@]} -gt 1 ]]; then
          mkdir -p "$target_dir"
          cp -a "$context/$src" "$target_dir/"
        else
          mkdir -p "$(dirname "$target_dir")"
          cp -a "$context/$src" "$target_dir"
        fi
      done
      ;;
    RUN)
      [ "$stage" = "$builder" ] || continue
      command=$rest
      trim() { local t=$1; t=${t#"${t%%[![:space:]]*}"}; printf '%s' "$t"; }
      command=$(trim "$command")
      while [[ $command == --* ]]; do command=$(trim "${command#* }"); done
      for word in $command; do
        [[ $word == /* ]] && fail "RUN uses the absolute path $word; keep builder commands relative to WORKDIR so this check can replay them"
      done
      mkdir -p "$root$workdir"
      [ -e "$root$workdir/target" ] || ln -s "$shared_target" "$root$workdir/target"
      say "RUN $command"
      (cd "$root$workdir" && CARGO_NET_OFFLINE=true env -u CARGO_TARGET_DIR bash -euo pipefail -c "$command") ||
        fail "the builder stage failed at: RUN $command"
      ;;
    EXPOSE | USER | ENTRYPOINT | CMD | LABEL | HEALTHCHECK | STOPSIGNAL | SHELL | VOLUME | ONBUILD) ;;
    *) fail "unsupported Dockerfile instruction: $keyword" ;;
  esac
done
[ -n "$builder" ] || fail "no FROM in $dockerfile"

# --- 3. what the runtime stage copies exists --------------------------------
binary=""
for copy in "${runtime_copies[@]}"; do
  from_stage=${copy%%|*}
  for src in ${copy#*|}; do
    if [ "$from_stage" = "$builder" ]; then
      [ -e "$root$src" ] || fail "COPY --from=$builder $src: the builder stage did not produce it"
      [ -x "$root$src" ] && [ -f "$root$src" ] && binary=$root$src
    elif [ -z "$from_stage" ]; then
      [ -e "$context/$src" ] || fail "COPY $src: not in the build context"
    fi
  done
done
[ -n "$binary" ] || fail "the runtime stage copies no executable from the builder"
"$binary" --version >/dev/null || fail "the built binary does not run: $binary --version"
say "builder stage OK: $("$binary" --version)"

# --- 4. the real thing, where it can run ------------------------------------
if ! command -v docker >/dev/null 2>&1; then
  say "docker build: skipped (no docker command)"
elif ! docker info >/dev/null 2>&1; then
  say "docker build: skipped (no Docker engine: 'docker info' failed)"
elif ! docker image inspect "${base_images[@]}" >/dev/null 2>&1; then
  say "docker build: skipped (base images not present locally: ${base_images[*]})"
else
  say "docker build"
  DOCKER_BUILDKIT=1 docker build -t invoice-reminder:image-check "$repo"
fi
