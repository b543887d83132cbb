#!/usr/bin/env bash
# Per-identity utilisation, convergence and ledger cost of the `leased`
# scope: runs crates/server/tests/identity_leases.rs (three regions, each a
# redis-server and a `tollgate serve`, the global redis-server 30–80 ms away
# each way behind delay proxies; tenants busy in one region each, 200 small
# tenants beside one big one, a tenant moving, then the faults) and
# summarises what each tenant was admitted per 1 s window. The policy: 100
# a 1 s window per tenant, floors 10% (ap 4, eu 3, us 3), term 1 s, renew
# 250 ms, rest 1 s: a tenant busy in eu or us alone may spend 93 there.
#
#   bash bench/identity_leases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test -q -p tollgate --test identity_leases -- --nocapture >"$log" 2>&1 || {
  tail -40 "$log" >&2
  exit 1
}
echo "per 1 s window: each tenant's admissions in eu us ap (a, b, c); utilisation = its best region ÷ 100"
awk -F'\t' '$1 == "window" {
  printf "%-20s a %3s %3s %3s   b %3s %3s %3s   c %3s %3s %3s\n", $2, $4, $5, $6, $7, $8, $9, $10, $11, $12
}' "$log"
echo
grep -P '^ledger\t' "$log" | awk -F'\t' '{ printf "ledger calls a second (one hot identity, one instance): %s\n", $3 }'
