#!/usr/bin/env bash
# The tower layer's overhead over loopback: one axum app answering
# `GET /items` (crates/tower/examples/layer_bench.rs), bare, behind
# tollgate's RateLimitLayer (embedded memory store, one rule keyed by
# X-Tenant; a token bucket, and GCRA) and behind tower_governor keyed by
# the same header (without and with its own headers), with limits
# no run reaches, each under wrk in the same run. Each row gives
# requests/s, latency percentiles, and the CPU a request cost the server
# and wrk (user + system, µs): on one machine the two share the cores.
#
#   bash bench/layer.sh            # defaults: wrk -t2 -c64 -d10s, 1 tenant
#   KEYS=100000 DURATION=30s bash bench/layer.sh
#   BIN=/path/to/layer_bench bash bench/layer.sh   # a build kept aside (A/B)
#
# The example is built with LTO off (the release profile's fat LTO takes
# long on a small machine); set LTO=fat to build it as the server is.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench/layer.sh needs wrk: apt-get install -y wrk" >&2; exit 1; }
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1}

. bench/lib.sh
trap stop_started EXIT
bin=$(layer_bench_bin)

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system

run() { # run NAME URL PID
  local name=$1 url=$2 pid=$3
  local out times before after
  times=$(mktemp)
  before=$(cpu_ticks "$pid")
  out=$( { TIMEFORMAT='%U %S'; time KEYS=$KEYS wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s bench/layer.lua "$url"; } 2>"$times")
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
  printf '%-30s %11s %9s %9s %8s %8s  %s\n' "$name" "$rps" "$p50" "$p99" "$server" "$wrk_us" "$errors"
}

bare=$(start "$bin" bare --listen 127.0.0.1:0)
bare_pid=$(tail -n1 "$started")
tollgate=$(start "$bin" tollgate --listen 127.0.0.1:0)
tollgate_pid=$(tail -n1 "$started")
tollgate_gcra=$(start "$bin" tollgate-gcra --listen 127.0.0.1:0)
tollgate_gcra_pid=$(tail -n1 "$started")
governor=$(start "$bin" governor --listen 127.0.0.1:0)
governor_pid=$(tail -n1 "$started")
governor_headers=$(start "$bin" governor-headers --listen 127.0.0.1:0)
governor_headers_pid=$(tail -n1 "$started")

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $KEYS tenant(s), on $(nproc) cores (load generator on the same machine)"
printf '%-30s %11s %9s %9s %8s %8s\n' app "requests/s" p50 p99 "server" "wrk"
run "bare axum" "$bare" "$bare_pid"
run "tollgate layer, memory store" "$tollgate" "$tollgate_pid"
run "tollgate layer, gcra" "$tollgate_gcra" "$tollgate_gcra_pid"
run "tower_governor" "$governor" "$governor_pid"
run "tower_governor, its headers" "$governor_headers" "$governor_headers_pid"
run "bare axum (again)" "$bare" "$bare_pid"
