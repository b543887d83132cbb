#!/usr/bin/env bash
# What a request id costs: /v1/check decisions/s and latency on 100,000 keys
# with and without a request id on every request, in the same run, on the
# memory store and on one local redis-server; then Redis's bytes per key
# (MEMORY USAGE) of the states and of the id records the run left.
#
#   bash bench/request_ids.sh            # defaults: wrk -t2 -c64 -d10s
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench/request_ids.sh needs $tool: apt-get install -y wrk redis-server" >&2; exit 1; }
done
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
cargo build --release -q -p tollgate --bin tollgate

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
pids=($!)
. bench/lib.sh
cleanup() { stop_started; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

printf 'server:\n  watch_interval_ms: 0\nstore: {redis: {url: "redis://127.0.0.1:%s"}}\n' "$port" > "$work/redis.yaml"
sed -n '/^policies:/,$p' bench/bench.yaml >> "$work/redis.yaml"

run() { # run NAME URL SCRIPT [RETRIES]
  local out
  out=$(KEYS=100000 RETRIES=${4:-1} wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "bench/$3" "$2")
  printf '%-44s %12s %10s %10s  %s\n' "$1" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1=="50%" {print $2}' <<<"$out")" \
    "$(awk '$1=="99%" {print $2}' <<<"$out")" \
    "$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')"
}

memory=$(start ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0)
redis=$(start ./target/release/tollgate serve --config "$work/redis.yaml" --listen 127.0.0.1:0)

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores, 100,000 keys (load generator and Redis on the same machine)"
printf '%-44s %12s %10s %10s\n' workload "requests/s" p50 p99
run "memory store, no request id" "$memory" check.lua
run "memory store, a new request id each" "$memory" check_id.lua
run "memory store, each id sent twice" "$memory" check_id.lua 2
run "Redis store, no request id" "$redis" check.lua
run "Redis store, a new request id each" "$redis" check_id.lua
run "Redis store, each id sent twice" "$redis" check_id.lua 2

# Bytes per key: a sample of the state keys and of the id records the runs
# left (each record holds the ids of one identity still inside their window).
sample() { # sample PATTERN: keys, mean MEMORY USAGE, mean HLEN (records)
  redis-cli -p "$port" --scan --pattern "$1" | head -n 1000 > "$work/keys"
  local bytes=0 ids=0 count=0
  while read -r key; do
    bytes=$((bytes + $(redis-cli -p "$port" memory usage "$key" samples 0)))
    if [[ $key == *:ids ]]; then ids=$((ids + $(redis-cli -p "$port" hlen "$key"))); fi
    count=$((count + 1))
  done < "$work/keys"
  awk -v b="$bytes" -v i="$ids" -v n="$count" 'BEGIN {
    if (n == 0) { print "none"; exit }
    if (i > 0) printf "%d keys sampled: %.1f bytes a key, %.2f ids a record, %.1f bytes an id\n", n, b / n, i / n, b / i
    else printf "%d keys sampled: %.1f bytes a key\n", n, b / n }'
}
echo "Redis id records (:ids) the runs left: $(sample 'tollgate:bench:gcra:*:ids')"
echo "Redis keys: $(redis-cli -p "$port" dbsize), used_memory: $(redis-cli -p "$port" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r') bytes"
# One identity spending its whole budget (its state then lives about a
# second), without and with an id (a UUID, 36 bytes), then 64 ids (a full
# record at the default retry_ids): MEMORY USAGE of each key at once.
usage() { redis-cli -p "$port" memory usage "$1" samples 0; }
check() { curl -s -o /dev/null "$redis/v1/check" -d "$1"; }
check '{"policy":"bench","key":"probe-a","cost":1000}'
echo "one identity, no id:   state $(usage 'tollgate:bench:gcra:{probe-a}') bytes"
check '{"policy":"bench","key":"probe-b","cost":1000,"request_id":"6f1c2b9e-5d7a-4e3b-9a41-0c8d2e7f3a15"}'
echo "one identity, one id:  state $(usage 'tollgate:bench:gcra:{probe-b}') bytes, record $(usage 'tollgate:bench:gcra:{probe-b}:ids') bytes"
for i in $(seq 64); do
  check "{\"policy\":\"bench\",\"key\":\"probe-c\",\"cost\":0,\"request_id\":\"6f1c2b9e-5d7a-4e3b-9a41-0c8d2e7f$(printf %04d "$i")\"}"
done
echo "one identity, 64 ids:  record $(usage 'tollgate:bench:gcra:{probe-c}:ids') bytes ($(redis-cli -p "$port" hlen 'tollgate:bench:gcra:{probe-c}:ids') ids)"
