#!/usr/bin/env bash
# Load harness for Envoy's rate limit service (RLS v3 gRPC): ShouldRateLimit
# calls/s, latency percentiles, and the CPU a call costs the server and the
# load client (user + system, µs, from /proc and `time`), beside what the
# same server spends on a /v1/check request under wrk in the same run, and
# beside a plain tonic server that answers OK without deciding
# (crates/server/examples/plain_tonic.rs: the stack most Rust RLS servers
# are built on). The client is crates/server/examples/rls_load.rs (tonic),
# on the memory store and on a redis-server started here on a free port.
#
#   bash bench/rls.sh                       # 200k calls, 100k keys
#   REQUESTS=500000 bash bench/rls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/rls.sh needs wrk: apt-get install -y wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "bench/rls.sh needs redis-server: apt-get install -y redis-server" >&2; exit 1; }
REQUESTS=${REQUESTS:-200000}
DURATION=${DURATION:-8s}
cargo build --release -q -p tollgate --bin tollgate --example rls_load --example plain_tonic

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system

started() { # started NAME CMD...: runs CMD, waits for its gRPC line; sets pid, http, grpc
  local name=$1; shift
  local out="$work/$name.out"
  "$@" >"$out" 2>/dev/null &
  pid=$!; pids+=("$pid")
  for _ in $(seq 200); do
    if grep -q '^grpc listening on' "$out" 2>/dev/null; then
      http=$(sed -n 's/^listening on //p' "$out")
      grpc=$(sed -n 's/^grpc listening on //p' "$out")
      return
    fi
    sleep 0.05
  done
  echo "$name did not start" >&2; exit 1
}

tollgate() { # tollgate NAME STORE_YAML
  local port; port=$(free_port)
  { cat bench/bench.yaml; printf '%s\n' "$2"; } >"bench/.rls-$1.yaml"
  started "$1" ./target/release/tollgate serve --config "bench/.rls-$1.yaml" --listen 127.0.0.1:0 --grpc-listen "127.0.0.1:$port"
  rm -f "bench/.rls-$1.yaml"
}

row() { # row NAME CALLS SERVER_TICKS CLIENT_SECONDS RATE P50 P99 NOTE
  awk -v name="$1" -v n="$2" -v t="$3" -v hz="$ticks" -v c="$4" -v rate="$5" -v p50="$6" -v p99="$7" -v note="$8" \
    'BEGIN {printf "%-44s %10s %8s %8s %8.1f %8.1f  %s\n", name, rate, p50, p99, t * 1e6 / hz / n, c * 1e6 / n, note}'
}

rls() { # rls NAME KEYS CONNECTIONS STREAMS
  local times="$work/times" before after out
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='%U %S'; time ./target/release/examples/rls_load "$grpc" "$REQUESTS" "$3" "$2" "$4"; } 2>"$times")
  after=$(cpu_ticks "$pid")
  local calls rate p50 p99 client note
  calls=$(sed -n 's/.*(\([0-9]*\) calls.*/\1/p' <<<"$out")
  rate=$(awk '{print $1}' <<<"$out")
  p50=$(awk '{print $4}' <<<"$out")us
  p99=$(awk '{print $7}' <<<"$out")us
  client=$(awk '{print $1 + $2}' "$times")
  note=$(sed -n 's/.*: \([0-9]* ok, [0-9]* over, [0-9]* errors\)).*/\1/p' <<<"$out")
  row "$1" "$calls" "$((after - before))" "$client" "$rate" "$p50" "$p99" "$note"
}

check() { # check NAME KEYS: /v1/check under wrk -t1 -c64
  local times="$work/times" before after out
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='%U %S'; time KEYS=$2 wrk -t1 -c64 -d"$DURATION" --latency -s bench/check.lua "$http"; } 2>"$times")
  after=$(cpu_ticks "$pid")
  local requests rate p50 p99 client errors
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  rate=$(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  client=$(awk '{print $1 + $2}' "$times")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  row "$1" "$requests" "$((after - before))" "$client" "$rate" "$p50" "$p99" "$errors"
}

echo "$REQUESTS ShouldRateLimit calls a row (rls_load), /v1/check under wrk -t1 -c64 -d$DURATION; $(nproc) cores, client on the same machine"
printf '%-44s %10s %8s %8s %8s %8s\n' workload "calls/s" p50 p99 server client
printf '%-44s %10s %8s %8s %8s %8s\n' "" "" "" "" "µs/call" "µs/call"

started plain ./target/release/examples/plain_tonic
rls "baseline plain tonic (OK, no decision) 64x1" 100000 64 1
rls "baseline plain tonic (OK, no decision) 8x8" 100000 8 8

tollgate memory "store: {memory: {}}"
check "/v1/check, memory, 100k keys" 100000
rls "RLS, memory, 100k keys, 64 conns x 1" 100000 64 1
rls "RLS, memory, 100k keys, 8 conns x 8" 100000 8 8
rls "RLS, memory, 1 hot key, 8 conns x 8" 1 8 8

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
tollgate redis "store: {redis: {url: \"redis://127.0.0.1:$rport\"}}"
check "/v1/check, redis, 100k keys" 100000
rls "RLS, redis, 100k keys, 64 conns x 1" 100000 64 1
rls "RLS, redis, 100k keys, 8 conns x 8" 100000 8 8
