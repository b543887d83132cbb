#!/usr/bin/env bash
# Load harness for scopes across regions: /v1/check decisions/s and latency
# percentiles for one policy of each scope, in one run, against one
# tollgate in region `a` of two. Its regional Redis is local; the global
# Redis sits behind a delay proxy (crates/server/examples/delay_proxy.rs,
# testkit's DelayProxy) holding each chunk 30–80 ms each way, as another
# region would. Utilisation with traffic in one region is exact and is
# checked by crates/server/tests/scopes.rs (leased: bench/leases.sh and
# crates/server/tests/leases.rs); this measures what each scope costs a
# decision.
#
#   bash bench/scopes.sh            # defaults: wrk -t2 -c64 -d10s
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench/scopes.sh needs $tool: apt-get install -y wrk redis-server" >&2; exit 1; }
done
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
MIN_MS=${MIN_MS:-30}
MAX_MS=${MAX_MS:-80}
# Batches in flight a lane to the far global store (store.redis.batch.in_flight).
IN_FLIGHT=${IN_FLIGHT:-2}
cargo build --release -q -p tollgate --bin tollgate --example delay_proxy

work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
regional=$(free_port); global=$(free_port)
pids=()
for port in "$regional" "$global"; do
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
  pids+=($!)
done
. bench/lib.sh
cleanup() { stop_started; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
for port in "$regional" "$global"; do
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
proxy=$(start ./target/release/examples/delay_proxy "127.0.0.1:$global" "$MIN_MS" "$MAX_MS")

cat >"$work/scopes.yaml" <<YAML
server: {watch_interval_ms: 0}
region: a
regions: {a: {instances: 1}, b: {instances: 1}}
stores:
  local: memory
  regional: {redis: {url: "redis://127.0.0.1:$regional"}}
  global: {redis: {url: "redis://$proxy", timeout: 2s, batch: {in_flight: $IN_FLIGHT}}}
policies:
  - {name: instance, algorithm: gcra, capacity: 1000, refill: {tokens: 1000, per: 1s}, scope: instance}
  - {name: region, algorithm: gcra, capacity: 1000, refill: {tokens: 1000, per: 1s}, scope: region}
  - {name: split, algorithm: gcra, capacity: 1000, refill: {tokens: 1000, per: 1s}, scope: split}
  - {name: leased, algorithm: gcra, capacity: 1000, refill: {tokens: 1000, per: 1s}, scope: {leased: {term: 2s, floor: 50%}}}
  - {name: global, algorithm: gcra, capacity: 1000, refill: {tokens: 1000, per: 1s}, scope: global}
YAML
base=$(start ./target/release/tollgate serve --config "$work/scopes.yaml" --listen 127.0.0.1:0)

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, 100,000 keys; global Redis ${MIN_MS}-${MAX_MS} ms away each way, $IN_FLIGHT batches in flight a lane"
printf '%-10s %12s %10s %10s  %s\n' scope req/s p50 p99 errors
for scope in instance region split leased global; do
  out=$(POLICY=$scope KEYS=100000 wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s bench/check.lua "$base")
  printf '%-10s %12s %10s %10s  %s\n' "$scope" \
    "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1=="50%" {print $2}' <<<"$out")" \
    "$(awk '$1=="99%" {print $2}' <<<"$out")" \
    "$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')"
done
