#!/usr/bin/env bash
# Utilisation and convergence of the `leased` scope across three regions:
# runs crates/server/tests/leases.rs (three regions, each a redis-server and
# two `tollgate serve` processes, the global redis-server 30–80 ms away each
# way behind delay proxies, a bounded load driver moving traffic between
# regions, then the faults) and summarises the admissions
# it tallied per 1 s window. The policy: 60 a 1 s window, floors 10 a
# region, spare 30, term 1 s, renew 250 ms, rest 1 s (explain's numbers).
#
#   bash bench/leases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test -q -p tollgate --test leases -- --nocapture >"$log" 2>&1 || {
  tail -40 "$log" >&2
  exit 1
}
echo "per 1 s window: admitted in a, b, c; total ÷ the limit 60"
awk -F'\t' '$1 == "window" {
  total = $4 + $5 + $6
  printf "%-17s %4s %4s %4s  %5.1f%%\n", $2, $4, $5, $6, 100 * total / 60
}' "$log"
echo
echo "convergence: whole windows after a shift until the busy region spends floor + spare (40)"
awk -F'\t' '$1 == "window" && ($2 == "in a" || $2 == "in b") {
  busy = ($2 == "in a") ? $4 : $5
  n[$2]++
  if (busy == 40 && !($2 in at)) at[$2] = n[$2]
} END {
  for (p in n) printf "%-6s %s window(s) (each 4 renewal periods)\n", p, (p in at) ? at[p] : "not within the phase"
}' "$log"
