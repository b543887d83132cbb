#!/usr/bin/env bash
# Per-identity utilisation, convergence and ledger cost of the `leased`
# scope beside `global` and `split`, in one run. Two test binaries on the
# same setup (three regions, each a redis-server and a `tollgate serve`,
# the global redis-server 30–80 ms away each way behind delay proxies; a
# per-tenant fixed window of 100 a second):
#   - crates/server/tests/identity_leases_compared.rs: the two-tenant and
#     the many-small-one-big workloads and a tenant moving regions, under
#     `leased` (floors 10%: ap 4, eu 3, us 3, term 1 s, renew 250 ms,
#     rest 1 s), `global` and `split` (ap 34, eu 33, us 33); then the
#     ledger's calls a second against 1, 10, 100, 250 hot identities on one
#     instance, beside explain's figure;
#   - crates/server/tests/identity_leases.rs: `leased` through the faults
#     (eu cut off, the global redis restarted empty, us's clock stepped).
#
#   bash bench/identity_leases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One test at a time: each starts three regions of processes.
cargo test -q -p tollgate --test identity_leases_compared --test identity_leases -- \
  --include-ignored --test-threads=1 --nocapture >"$log" 2>&1 || {
  tail -40 "$log" >&2
  exit 1
}
echo "utilisation: the busy tenant's admissions in its region per settled 1 s window ÷ 100"
awk -F'\t' '$1 == "utilisation" {
  printf "%-20s %-7s %-16s %5s   %s\n", $2, $3, $4, $5, $6
}' "$log"
echo
echo "convergence: c moves us → eu; ms until its 90th admission in one eu window, from the move and from the first"
echo "window boundary after it (the window of the move is spent under global; explain prints, for leased:"
echo "term + rest + 2·renew + the global store's timeout)"
awk -F'\t' '$1 == "convergence" {
  unit = ($3 ~ /^[0-9]+$/) ? " ms" : ""
  printf "%-7s from the move %6s%s   from the next window %6s%s   (explain, leased: %s ms)\n", $2, $3, unit, $4, unit, $5
}' "$log"
echo
echo "ledger calls a second on the global redis against hot identities on one instance"
awk -F'\t' '$1 == "hot" { printf "%4s hot   measured %6s   explain %s\n", $2, $3, $4 }' "$log"
awk -F'\t' '$1 == "shed" { printf "%-8s checks not sent for want of a free slot (of 256 in flight a stream): %s, unanswered: %s\n", $2, $3, $4 }' "$log"
echo
echo "leased through the faults (identity_leases.rs): each tenant's admissions in eu us ap (a, b, c)"
awk -F'\t' '$1 == "window" {
  printf "%-20s a %3s %3s %3s   b %3s %3s %3s   c %3s %3s %3s\n", $2, $4, $5, $6, $7, $8, $9, $10, $11, $12
}' "$log"
grep -P '^ledger\tcalls_per_second' "$log" | awk -F'\t' '{ printf "ledger calls a second (one hot identity, one instance): %s\n", $3 }'
