#!/usr/bin/env bash
# Load harness for Envoy's rate limit service (RLS v3 gRPC): ShouldRateLimit
# calls/s, latency percentiles, and the CPU a call costs the server and the
# load client (user + system, µs, from /proc and `time`), beside what the
# same server spends on a /v1/check request under wrk in the same run, and
# beside a plain tonic server that answers OK without deciding
# (crates/server/examples/plain_tonic.rs: the stack most Rust RLS servers
# are built on) and the floor of tollgate's own stack (plain_h2.rs: hyper's
# HTTP/2 on a runtime per core, a canned answer). Two load clients:
# crates/server/examples/rls_load.rs (tonic; 100k keys), and h2load
# (nghttp2, C: a lighter client, so the server's share of the two cores is
# truer) replaying one serialized call (one key). On the memory store and
# on a redis-server started here on a free port; the last lines give each
# store's RLS server CPU a call over its /v1/check server CPU a request.
#
#   bash bench/rls.sh                       # 200k calls a row, 100k keys
#   REQUESTS=500000 bash bench/rls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/rls.sh needs wrk: apt-get install -y wrk" >&2; exit 1; }
command -v h2load >/dev/null || { echo "bench/rls.sh needs h2load: apt-get install -y nghttp2-client" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "bench/rls.sh needs redis-server: apt-get install -y redis-server" >&2; exit 1; }
REQUESTS=${REQUESTS:-200000}
DURATION=${DURATION:-8s}
cargo build --release -q -p tollgate --bin tollgate --example rls_load --example plain_tonic --example plain_h2

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

# One ShouldRateLimit message, gRPC-framed: domain "bench", one descriptor
# (user, 1).
printf '\x00\x00\x00\x00\x14\x0a\x05bench\x12\x0b\x0a\x09\x0a\x04user\x12\x011' >"$work/call.bin"

h2() { # h2 NAME CONNECTIONS STREAMS: h2load replaying call.bin
  local times="$work/times" before after out
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='%U %S'; time h2load -n "$REQUESTS" -c "$2" -m "$3" -d "$work/call.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://$grpc/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"; } 2>"$times")
  after=$(cpu_ticks "$pid")
  local calls rate mean client note
  calls=$(awk '/^requests:/ {print $8}' <<<"$out")
  rate=$(awk '/^finished in/ {gsub(",", ""); printf "%.0f", $4}' <<<"$out")
  mean=$(awk '/^time for request:/ {print $5}' <<<"$out")
  client=$(awk '{print $1 + $2}' "$times")
  note="mean $mean; $(awk '/^status codes:/ {print $3, $4}' <<<"$out" | tr -d ,)"
  row "$1" "$calls" "$((after - before))" "$client" "$rate" "-" "-" "$note"
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

server_us() { # server_us NAME: the server µs a call of the row NAME
  awk -v n="$1" '{name = substr($0, 1, 44); sub(/ +$/, "", name); split(substr($0, 45), f, " ")} name == n {print f[4]}' "$work/rows" | tail -1
}
exec > >(tee "$work/rows")

started plain ./target/release/examples/plain_tonic
rls "baseline plain tonic (OK, no decision) 64x1" 100000 64 1
rls "baseline plain tonic (OK, no decision) 8x8" 100000 8 8
h2 "baseline plain tonic, h2load 8x8" 8 8
started floor ./target/release/examples/plain_h2
rls "floor hyper HTTP/2, canned answer 64x1" 100000 64 1
rls "floor hyper HTTP/2, canned answer 8x8" 100000 8 8
h2 "floor hyper HTTP/2, canned, h2load 8x8" 8 8

tollgate memory "store: {memory: {}}"
check "/v1/check, memory, 100k keys" 100000
rls "RLS, memory, 100k keys, 64 conns x 1" 100000 64 1
rls "RLS, memory, 100k keys, 8 conns x 8" 100000 8 8
rls "RLS, memory, 1 hot key, 8 conns x 8" 1 8 8
h2 "RLS, memory, 1 key, h2load 64x1" 64 1
h2 "RLS, memory, 1 key, h2load 8x8" 8 8

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
tollgate redis "store: {redis: {url: \"redis://127.0.0.1:$rport\"}}"
check "/v1/check, redis, 100k keys" 100000
rls "RLS, redis, 100k keys, 64 conns x 1" 100000 64 1
rls "RLS, redis, 100k keys, 8 conns x 8" 100000 8 8
h2 "RLS, redis, 1 key, h2load 8x8" 8 8

ratio() { # ratio RLS_ROW CHECK_ROW
  awk -v a="$(server_us "$1")" -v b="$(server_us "$2")" -v n="$1" -v m="$2" \
    'BEGIN {printf "server CPU: %s / %s = %.2fx\n", n, m, a / b}'
}
echo
for r in "RLS, memory, 100k keys, 64 conns x 1" "RLS, memory, 100k keys, 8 conns x 8" "RLS, memory, 1 key, h2load 8x8"; do
  ratio "$r" "/v1/check, memory, 100k keys"
done
for r in "RLS, redis, 100k keys, 64 conns x 1" "RLS, redis, 100k keys, 8 conns x 8" "RLS, redis, 1 key, h2load 8x8"; do
  ratio "$r" "/v1/check, redis, 100k keys"
done
