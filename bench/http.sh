#!/usr/bin/env bash
# Load harness for the HTTP API: decisions/s and latency percentiles for
# /v1/check and /v1/authorize on one hot key and on 100,000 keys, beside a
# baseline measured in the same run (a plain axum handler that parses the
# same JSON and updates one map entry: crates/server/examples/plain_axum.rs)
# and the same on hyper with one runtime per core (plain_hyper.rs: the ceiling
# of tollgate's serving architecture here) and with HTTP framed by hand on raw
# TCP (plain_tcp.rs: the floor no HTTP server doing this work goes below here).
# Each row also gives the CPU a request cost the server and wrk (user +
# system, µs): on one machine the two share the cores, so together they
# bound requests/s at cores / (server + wrk).
#
#   bash bench/http.sh            # defaults: wrk -t2 -c64 -d10s
#   DURATION=30s CONNECTIONS=128 bash bench/http.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/http.sh needs wrk: apt-get install -y wrk" >&2; exit 1; }
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
cargo build --release -q -p tollgate --bin tollgate --example plain_axum --example plain_hyper --example plain_tcp

. bench/lib.sh
trap stop_started EXIT

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system

run() { # run NAME URL PID SCRIPT KEYS
  local name=$1 url=$2 pid=$3 script=$4 keys=$5
  local out times before after
  times=$(mktemp)
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='%U %S'; time KEYS=$keys wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "bench/$script" "$url"; } 2>"$times")
  after=$(cpu_ticks "$pid")
  local rps p50 p99 requests
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  local server wrk_us
  server=$(awk -v t="$((after - before))" -v hz="$ticks" -v n="$requests" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}')
  wrk_us=$(awk -v n="$requests" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$times")
  rm -f "$times"
  local errors; errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  printf '%-38s %11s %9s %9s %8s %8s  %s\n' "$name" "$rps" "$p50" "$p99" "$server" "$wrk_us" "$errors"
}

tollgate=$(start ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0)
tollgate_pid=$(tail -n1 "$started")
plain=$(start ./target/release/examples/plain_axum)
plain_pid=$(tail -n1 "$started")
hyper=$(start ./target/release/examples/plain_hyper)
hyper_pid=$(tail -n1 "$started")
floor=$(start ./target/release/examples/plain_tcp)
floor_pid=$(tail -n1 "$started")

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores (load generator on the same machine)"
printf '%-38s %11s %9s %9s %8s %8s\n' workload "requests/s" p50 p99 "server" "wrk"
run "baseline plain axum, 100k keys" "$plain" "$plain_pid" check.lua 100000
run "baseline plain hyper/core, 100k keys" "$hyper" "$hyper_pid" check.lua 100000
run "floor: hand-framed TCP, 100k keys" "$floor" "$floor_pid" check.lua 100000
run "/v1/check, 100k keys" "$tollgate" "$tollgate_pid" check.lua 100000
run "/v1/check, 1 hot key" "$tollgate" "$tollgate_pid" check.lua 1
run "/v1/authorize, 100k keys" "$tollgate" "$tollgate_pid" authorize.lua 100000
run "/v1/authorize, 1 hot key" "$tollgate" "$tollgate_pid" authorize.lua 1
run "baseline plain axum, 1 hot key" "$plain" "$plain_pid" check.lua 1
