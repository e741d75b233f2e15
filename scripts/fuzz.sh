#!/usr/bin/env bash
# Replays the randomized source test (tests/faults/random): one seed, or a
# longer run of many, in invoice or customer mode.
#
#   scripts/fuzz.sh --seed 17 --grouping customer     # one seed, as CI printed it
#   scripts/fuzz.sh --seeds 200 --grouping customer   # before a release (~10 s a seed)
#   scripts/fuzz.sh --seeds 50 --first 1000           # seeds 1000..1049, invoice mode
set -euo pipefail
cd "$(dirname "$0")/.."

seed="" seeds="" first="" grouping="invoice"
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --first) first="$2"; shift 2 ;;
    --grouping) grouping="$2"; shift 2 ;;
    *) echo "usage: scripts/fuzz.sh (--seed N | --seeds N [--first N]) [--grouping invoice|customer]" >&2; exit 2 ;;
  esac
done
case "$grouping" in
  invoice) one='random_sources_under'; many='fuzz_many_seeds_of_random_sources' ;;
  customer) one='random_customer_sources'; many='fuzz_many_seeds_of_random_customer_sources' ;;
  *) echo "--grouping is invoice or customer" >&2; exit 2 ;;
esac
if [ -n "$seed" ]; then
  exec env FUZZ_SEED="$seed" cargo nextest run --locked --test faults -E "test(/random::$one/)"
fi
[ -n "$seeds" ] || { echo "give --seed N or --seeds N" >&2; exit 2; }
exec env FUZZ_SEEDS="$seeds" ${first:+FUZZ_FIRST_SEED="$first"} \
  cargo nextest run --locked --test faults --run-ignored only -E "test(/random::$many/)"
