#!/usr/bin/env bash
# Instructions a request, counted by callgrind: the one figure of the HTTP
# path that does not move with the machine's load, so a change to the hot
# path can be measured before and after on a shared machine. Each server runs
# under valgrind; wrk (-t1 -c8) warms it up, the counters are zeroed, wrk
# drives it for DURATION, and the user-space instructions the server executed
# are divided by the requests wrk completed. Kernel work (the syscalls) is
# not counted; `bench/http.sh` gives the CPU time a request, kernel included.
# The RLS rows do the same for ShouldRateLimit with rls_load (tonic, 8
# HTTP/2 connections, one call in flight each) in place of wrk, beside a
# plain tonic server that answers OK without deciding and the floor of
# tollgate's own stack (hyper's HTTP/2 on a runtime per core, a canned
# answer: examples/plain_h2.rs); `bench/rls.sh` gives their CPU time.
#
#   bash bench/instructions.sh          # DURATION=8s
#   ROWS=rls bash bench/instructions.sh # only the RLS rows
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk valgrind callgrind_control; do
  command -v "$tool" >/dev/null || { echo "bench/instructions.sh needs $tool: apt-get install -y wrk valgrind" >&2; exit 1; }
done
DURATION=${DURATION:-8s}
cargo build --release -q -p tollgate --bin tollgate --example plain_axum --example plain_hyper --example plain_tcp \
  --example plain_tonic --example plain_h2 --example rls_load

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

count() { # count NAME SCRIPT CMD...
  local name=$1 script=$2; shift 2
  local base; base="$work/$(tr -c 'a-z0-9\n' _ <<<"$name")"
  local out="$base.out"
  valgrind --tool=callgrind --callgrind-out-file="$base.cg" "$@" >"$out" 2>"$base.err" &
  local pid=$!
  for _ in $(seq 600); do [ -s "$out" ] && break; sleep 0.05; done
  local url; url=$(sed -n '1s/^listening on //p' "$out")
  [ -n "$url" ] || { echo "$name did not start under valgrind: $(tail -3 "$base.err")" >&2; exit 1; }
  KEYS=100000 wrk -t1 -c8 -d3s -s "bench/$script" "$url" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local result; result=$(KEYS=100000 wrk -t1 -c8 -d"$DURATION" -s "bench/$script" "$url")
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local requests instructions
  requests=$(awk '/requests in/ {print $1}' <<<"$result")
  instructions=$(grep -h '^summary:' "$base".cg.* | awk '{s += $2} END {print s}')
  awk -v n="$name" -v i="$instructions" -v r="$requests" \
    'BEGIN {printf "%-38s %10d requests %8.0f instructions a request\n", n, r, i / r}'
}

count_rls() { # count_rls NAME CMD...: CMD prints `grpc listening on ADDR`
  local name=$1; shift
  local base; base="$work/$(tr -c 'a-z0-9\n' _ <<<"$name")"
  local out="$base.out"
  valgrind --tool=callgrind --callgrind-out-file="$base.cg" "$@" >"$out" 2>"$base.err" &
  local pid=$!
  local addr=""
  for _ in $(seq 600); do
    addr=$(sed -n 's/^grpc listening on //p' "$out")
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "$name did not start under valgrind: $(tail -3 "$base.err")" >&2; exit 1; }
  ./target/release/examples/rls_load "$addr" "$RLS_WARMUP" 8 100000 >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local result; result=$(./target/release/examples/rls_load "$addr" "$RLS_CALLS" 8 100000)
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local calls instructions
  calls=$(sed -n 's/.*(\([0-9]*\) calls.*/\1/p' <<<"$result")
  instructions=$(grep -h '^summary:' "$base".cg.* | awk '{s += $2} END {print s}')
  awk -v n="$name" -v i="$instructions" -v r="$calls" \
    'BEGIN {printf "%-38s %10d calls    %8.0f instructions a call\n", n, r, i / r}'
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RLS_WARMUP=${RLS_WARMUP:-8000}
RLS_CALLS=${RLS_CALLS:-24000}

ROWS=${ROWS:-all}
if [ "$ROWS" != rls ]; then
echo "callgrind, wrk -t1 -c8 -d$DURATION after a 3 s warm-up, 100,000 keys"
count "baseline plain axum" check.lua ./target/release/examples/plain_axum
count "baseline plain hyper/core" check.lua ./target/release/examples/plain_hyper
count "floor: hand-framed TCP" check.lua ./target/release/examples/plain_tcp
count "/v1/check" check.lua ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0
count "/v1/authorize" authorize.lua ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0
fi
echo "callgrind, rls_load $RLS_CALLS calls (8 connections x 1 stream) after $RLS_WARMUP warm-up calls, 100,000 keys"
count_rls "baseline plain tonic (OK, no decision)" ./target/release/examples/plain_tonic
count_rls "floor: hyper HTTP/2, canned answer" ./target/release/examples/plain_h2
count_rls "ShouldRateLimit" ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0 --grpc-listen "127.0.0.1:$(free_port)"
