#!/usr/bin/env bash
# `tollgate replay` on the memory store: LINES one-check lines over four
# policies (one an algorithm) and 20,000 identities, made by a fixed seed so
# every run reads the same trace. Prints the wall and CPU time and peak
# memory of RUNS runs (GNU time), then the instructions of the first 100,000
# lines (callgrind: the figure that does not move with the machine's load).
# BASE=path/to/another/tollgate runs the same beside it, for a before/after.
#
#   bash bench/replay.sh                     # LINES=1000000 RUNS=5
#   BASE=/tmp/old/tollgate bash bench/replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench/replay.sh needs $tool: apt-get install -y valgrind time python3" >&2; exit 1; }
done
LINES=${LINES:-1000000}
RUNS=${RUNS:-5}
cargo build --release -q -p tollgate --bin tollgate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/policies.yaml" <<'YAML'
policies:
  - {name: tb, algorithm: token_bucket, capacity: 100, refill: {tokens: 10, per: 1s}}
  - {name: fw, algorithm: fixed_window, limit: 100, window: 1m}
  - {name: sw, algorithm: sliding_window, limit: 100, window: 1m}
  - {name: gc, algorithm: gcra, capacity: 100, refill: {tokens: 10, per: 1s}}
YAML
python3 - "$LINES" >"$work/trace.jsonl" <<'PY'
import random, sys
random.seed(7)
t = 1_700_000_000_000
out = sys.stdout
for _ in range(int(sys.argv[1])):
    t += random.randint(0, 3)
    p = random.choice(["tb", "fw", "sw", "gc"])
    out.write('{"t_ms":%d,"policy":"%s","key":"user-%d","cost":%d}\n'
              % (t, p, random.randint(0, 20000), random.randint(1, 3)))
PY
head -100000 "$work/trace.jsonl" >"$work/head.jsonl"

measure() { # measure NAME BINARY
  local name=$1 bin=$2
  for _ in $(seq "$RUNS"); do
    /usr/bin/time -f "$name wall %e s, cpu %U+%S s, peak %M KiB" \
      "$bin" replay --config "$work/policies.yaml" <"$work/trace.jsonl" >/dev/null
  done
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.cg" \
    "$bin" replay --config "$work/policies.yaml" <"$work/head.jsonl" 2>&1 >/dev/null |
    sed -n "s/.*Collected : /$name instructions, 100,000 lines: /p"
}

measure tollgate target/release/tollgate
if [ -n "${BASE:-}" ]; then measure base "$BASE"; fi
