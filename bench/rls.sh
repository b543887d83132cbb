#!/usr/bin/env bash
# Load harness for Envoy's rate limit service (RLS v3 gRPC): ShouldRateLimit
# calls/s and latency percentiles from a tonic client
# (crates/server/examples/rls_load.rs), on the memory store and on a
# redis-server started here on a free port. Compare with bench/http.sh.
#
#   bash bench/rls.sh                       # 200k calls, 32 connections, 100k keys
#   REQUESTS=500000 CONCURRENCY=64 bash bench/rls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-200000}
CONCURRENCY=${CONCURRENCY:-32}
cargo build --release -q -p tollgate --bin tollgate --example rls_load

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cat >"$work/bench_rls.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000
YAML

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

serve() { # serve NAME STORE_YAML; prints the gRPC address
  local name=$1 store=$2 port; port=$(free_port)
  printf 'server: {watch_interval_ms: 0}\n%s\nenvoy_ratelimit_configs: [bench_rls.yaml]\n' "$store" >"$work/$name.yaml"
  local out="$work/$name.out"
  ./target/release/tollgate serve --config "$work/$name.yaml" --listen 127.0.0.1:0 --grpc-listen "127.0.0.1:$port" >"$out" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q '^grpc listening' "$out" 2>/dev/null; then echo "127.0.0.1:$port"; return; fi
    sleep 0.05
  done
  echo "tollgate did not start" >&2; exit 1
}

echo "rls_load: $REQUESTS ShouldRateLimit calls, $CONCURRENCY HTTP/2 connections, on $(nproc) cores (client on the same machine)"
memory=$(serve memory "store: {memory: {}}")
printf '%-28s ' "memory store, 100k keys"; ./target/release/examples/rls_load "$memory" "$REQUESTS" "$CONCURRENCY" 100000
printf '%-28s ' "memory store, 1 hot key";  ./target/release/examples/rls_load "$memory" "$REQUESTS" "$CONCURRENCY" 1

if command -v redis-server >/dev/null; then
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
  pids+=($!)
  sleep 0.3
  redis=$(serve redis "store: {redis: {url: \"redis://127.0.0.1:$rport\"}}")
  printf '%-28s ' "redis store, 100k keys"; ./target/release/examples/rls_load "$redis" "$REQUESTS" "$CONCURRENCY" 100000
  printf '%-28s ' "redis store, 1 hot key";  ./target/release/examples/rls_load "$redis" "$REQUESTS" "$CONCURRENCY" 1
else
  echo "redis-server missing: the Redis rows are skipped (apt-get install redis-server)"
fi
