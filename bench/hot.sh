#!/usr/bin/env bash
# Load harness for hot keys: one hot key from 64 connections through two
# tollgate instances, beside a non-hot workload (100,000 keys), in one run:
#   - on one Redis: a hot key under its limit (every decision a script call,
#     batched), the same with local leases (hot_lease: blocks taken in one
#     call, spent locally), and an abusive one far over it (the
#     rejected-until cache answers it: the shield), and far over it under
#     hot_lease (a refused block is remembered until the store's wait);
#   - on a 3-master Cluster: the hot key under its limit with 1, 4 and 16
#     shards (docs/config.md, shards).
# For each: decisions/s (both instances' wrk summed) and Redis commands per
# decision (INFO commandstats on every node: EVALSHA/EVAL calls ÷ decisions).
#
#   bash bench/hot.sh               # defaults: wrk -t1 -c32 -d10s per instance
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench/hot.sh needs $tool: apt-get install -y wrk redis-server" >&2; exit 1; }
done
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
cargo build --release -q -p tollgate --bin tollgate

work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
. bench/lib.sh
cleanup() { stop_started; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
redis_at() { # redis_at PORT [ARGS...]
  local port=$1; shift
  mkdir -p "$work/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/$port" "$@" >/dev/null &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
standalone=$(free_port); redis_at "$standalone"
nodes=()
for _ in 1 2 3; do
  # The bus port given, since port + 10000 may not exist.
  port=$(free_port); bus=$(free_port)
  redis_at "$port" --cluster-enabled yes --cluster-config-file "nodes-$port.conf" --cluster-port "$bus"
  nodes+=("$port")
done
redis-cli --cluster create $(printf "127.0.0.1:%s " "${nodes[@]}") --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 100); do
  redis-cli -p "${nodes[0]}" cluster info | grep -q cluster_state:ok && break; sleep 0.1
done

calls() { # calls PORT...: EVALSHA + EVAL calls so far on these nodes
  local total=0 n port
  for port in "$@"; do
    n=$(redis-cli -p "$port" info commandstats | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ {s += $3} END {print s + 0}')
    total=$((total + n))
  done
  echo "$total"
}

# run NAME POLICY KEYS CONFIG PORTS...: two instances, one wrk each, summed.
run() {
  local name=$1 policy=$2 keys=$3 config=$4; shift 4
  local a b before after out_a out_b reqs rate
  a=$(start ./target/release/tollgate serve --config "$config" --listen 127.0.0.1:0)
  b=$(start ./target/release/tollgate serve --config "$config" --listen 127.0.0.1:0)
  before=$(calls "$@")
  out_a=$(mktemp); out_b=$(mktemp)
  POLICY=$policy KEYS=$keys wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/check.lua "$a" >"$out_a" &
  local first=$!
  POLICY=$policy KEYS=$keys wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/check.lua "$b" >"$out_b"
  wait "$first"
  after=$(calls "$@")
  reqs=$(cat "$out_a" "$out_b" | awk '/requests in/ {s += $1} END {print s}')
  rate=$(cat "$out_a" "$out_b" | awk '/Requests\/sec/ {s += $2} END {printf "%.0f", s}')
  printf '%-34s %10s %12s\n' "$name" "$rate" "$(awk -v c=$((after - before)) -v r="$reqs" 'BEGIN {printf "%.4f", c / r}')"
  rm -f "$out_a" "$out_b"
  stop_started; started=$(mktemp)
}

policies='
  - {name: under, algorithm: gcra, capacity: 1000000000, refill: {tokens: 1000000000, per: 1s}}
  - {name: blocks, algorithm: gcra, capacity: 1000000000, refill: {tokens: 1000000000, per: 1s}, hot_lease: {above: 1000, term: 200ms}}
  - {name: over, algorithm: gcra, capacity: 100, refill: {tokens: 100, per: 1s}}
  - {name: flood, algorithm: token_bucket, capacity: 3000, refill: {tokens: 700, per: 1s}, hot_lease: {above: 1000, term: 200ms}}'
cat >"$work/standalone.yaml" <<YAML
server: {watch_interval_ms: 0}
store: {redis: {url: "redis://127.0.0.1:$standalone"}}
policies:$policies
YAML
cat >"$work/memory.yaml" <<YAML
server: {watch_interval_ms: 0}
store: {memory: {}}
policies:$policies
YAML
cluster_urls=$(printf '"redis://127.0.0.1:%s", ' "${nodes[@]}"); cluster_urls=${cluster_urls%, }
for shards in 1 4 16; do
  cat >"$work/cluster-$shards.yaml" <<YAML
server: {watch_interval_ms: 0}
store: {redis: {cluster: [$cluster_urls]}}
policies:
  - {name: under, algorithm: gcra, capacity: 1000000000, refill: {tokens: 1000000000, per: 1s}, shards: $shards}
YAML
done

echo "two instances, wrk -t1 -c$CONNECTIONS -d$DURATION each; Redis 7 on loopback"
printf '%-34s %10s %12s\n' workload 'req/s' 'calls/dec'
run "memory: one hot key (baseline)" under 1 "$work/memory.yaml"
run "redis: 100,000 keys (not hot)" under 100000 "$work/standalone.yaml" "$standalone"
run "redis: one hot key, under limit" under 1 "$work/standalone.yaml" "$standalone"
run "redis: one hot key, hot_lease" blocks 1 "$work/standalone.yaml" "$standalone"
run "redis: one hot key, 100/s limit" over 1 "$work/standalone.yaml" "$standalone"
run "redis: hot key far over, hot_lease" flood 1 "$work/standalone.yaml" "$standalone"
run "cluster: 100,000 keys (not hot)" under 100000 "$work/cluster-1.yaml" "${nodes[@]}"
for shards in 1 4 16; do
  run "cluster: one hot key, $shards shard(s)" under 1 "$work/cluster-$shards.yaml" "${nodes[@]}"
done
