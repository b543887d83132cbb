#!/usr/bin/env bash
# Decision latency in the three states of a Redis-backed tollgate (issue 5):
# healthy, store stalled before the circuit opens, circuit open; beside the
# memory store, in one run. Needs redis-server and wrk.
#
#   bash bench/failure.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server curl; do
  command -v "$tool" >/dev/null || { echo "bench/failure.sh needs $tool" >&2; exit 1; }
done
DURATION=${DURATION:-5s}
cargo build --release -q -p tollgate --bin tollgate
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
redis=$!
pids=($redis)
. bench/lib.sh
cleanup() { kill -CONT "$redis" 2>/dev/null || true; stop_started; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
sleep 0.3

policies='policies:
  - name: bench
    algorithm: gcra
    capacity: 1000000
    refill: { tokens: 1000000, per: 1s }
    on_store_failure: local
    local_share_percent: 50'
printf 'server: {watch_interval_ms: 0}\nstore: {redis: {url: "redis://127.0.0.1:%s"}}\n%s\n' "$port" "$policies" > "$work/redis.yaml"
printf 'server: {watch_interval_ms: 0}\n%s\n' "$policies" > "$work/memory.yaml"

serve() { start ./target/release/tollgate serve --config "$work/$1.yaml" --listen 127.0.0.1:0; }
load() { # load NAME URL
  local out
  out=$(KEYS=100000 POLICY=bench wrk -t2 -c64 -d"$DURATION" --latency -s bench/check.lua "$2")
  printf '%-40s %10s req/s  p50 %8s  p99 %8s\n' "$1" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1=="50%" {print $2}' <<<"$out")" "$(awk '$1=="99%" {print $2}' <<<"$out")"
}
one() { # one URL: the time of a single decision
  curl -s -o /dev/null -w '%{time_total}' -X POST "$1/v1/check" -d '{"policy":"bench","key":"probe"}'
}

memory=$(serve memory)
shared=$(serve redis)
load "memory store" "$memory"
load "redis, healthy" "$shared"
kill -STOP "$redis"
printf '%-40s' "redis stalled, before the circuit opens:"
for _ in 1 2 3 4 5; do printf ' %ss' "$(one "$shared")"; done
echo "  (each waits the 250 ms timeout)"
load "redis stalled, circuit open" "$shared"
kill -CONT "$redis"
