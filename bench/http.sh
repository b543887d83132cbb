#!/usr/bin/env bash
# Load harness for the HTTP API: decisions/s and latency percentiles for
# /v1/check and /v1/authorize on one hot key and on 100,000 keys, beside a
# baseline measured in the same run (a plain axum handler that parses the
# same JSON and updates one map entry: crates/server/examples/plain_axum.rs)
# and the same on hyper with one runtime per core (plain_hyper.rs: the ceiling
# of tollgate's serving architecture here).
#
#   bash bench/http.sh            # defaults: wrk -t2 -c64 -d10s
#   DURATION=30s CONNECTIONS=128 bash bench/http.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/http.sh needs wrk: apt-get install -y wrk" >&2; exit 1; }
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
cargo build --release -q -p tollgate --bin tollgate --example plain_axum --example plain_hyper

. bench/lib.sh
trap stop_started EXIT

run() { # run NAME URL SCRIPT KEYS
  local name=$1 url=$2 script=$3 keys=$4
  local out
  out=$(KEYS=$keys wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "bench/$script" "$url")
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  local errors; errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  printf '%-34s %12s %10s %10s  %s\n' "$name" "$rps" "$p50" "$p99" "$errors"
}

tollgate=$(start ./target/release/tollgate serve --config bench/bench.yaml --listen 127.0.0.1:0)
plain=$(start ./target/release/examples/plain_axum)
hyper=$(start ./target/release/examples/plain_hyper)

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores (load generator on the same machine)"
printf '%-34s %12s %10s %10s\n' workload "requests/s" p50 p99
run "baseline plain axum, 100k keys" "$plain" check.lua 100000
run "baseline plain hyper/core, 100k keys" "$hyper" check.lua 100000
run "/v1/check, 100k keys" "$tollgate" check.lua 100000
run "/v1/check, 1 hot key" "$tollgate" check.lua 1
run "/v1/authorize, 100k keys" "$tollgate" authorize.lua 100000
run "/v1/authorize, 1 hot key" "$tollgate" authorize.lua 1
run "baseline plain axum, 1 hot key" "$plain" check.lua 1
