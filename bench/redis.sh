#!/usr/bin/env bash
# Load harness for /v1/check on the Redis store: decisions/s and latency
# percentiles on 100,000 keys against one local redis-server started here,
# beside, in the same run: the usual Redis limiter (a plain axum handler
# making one EVALSHA of tollgate's gcra script per request:
# crates/server/examples/plain_redis.rs), redis-benchmark's EVALSHA ceiling
# of one Redis core, and tollgate on its memory store.
#
#   bash bench/redis.sh            # defaults: wrk -t2 -c64 -d10s
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench/redis.sh needs $tool: apt-get install -y wrk redis-server" >&2; exit 1; }
done
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
cargo build --release -q -p tollgate --bin tollgate --example plain_redis

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

run() { # run NAME URL
  local out
  out=$(KEYS=100000 wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s bench/check.lua "$2")
  printf '%-40s %12s %10s %10s  %s\n' "$1" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1=="50%" {print $2}' <<<"$out")" \
    "$(awk '$1=="99%" {print $2}' <<<"$out")" \
    "$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')"
}

tollgate_redis=$(start ./target/release/tollgate serve --config "$work/redis.yaml" --listen 127.0.0.1:0)
tollgate_memory=$(start ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0)
plain=$(start ./target/release/examples/plain_redis "redis://127.0.0.1:$port")

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores, 100,000 keys (load generator and Redis on the same machine)"
printf '%-40s %12s %10s %10s\n' workload "requests/s" p50 p99
run "baseline: one EVALSHA per request" "$plain"
run "/v1/check, Redis store" "$tollgate_redis"
run "/v1/check, memory store" "$tollgate_memory"
# The gcra script's SHA1: the text tollgate and the baseline load
# (common.lua + gcra.lua + decide.lua, as crates/store/src/redis/script.rs joins them).
sha=$(cat crates/store/lua/common.lua crates/store/lua/gcra.lua crates/store/lua/decide.lua | sha1sum | cut -d' ' -f1)
ceiling=$(redis-benchmark -p "$port" -c "$CONNECTIONS" -n 300000 -r 100000 -q \
  evalsha "$sha" 1 'bench:gcra:{__rand_int__}' '' 1000 gcra 1 1000 1 1 0 | awk '{for (i = 1; i < NF; i++) if ($(i+1) == "requests") print $i}')
echo "redis-benchmark EVALSHA gcra (one decision a call; the ceiling of one Redis core): $ceiling calls/s"
echo "Redis commands served: $(redis-cli -p "$port" info commandstats | grep -E 'cmdstat_(evalsha|eval|get|set):' | cut -d, -f1 | tr '\n' ' ')"
