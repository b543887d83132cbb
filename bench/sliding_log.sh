#!/usr/bin/env bash
# Redis time of one sliding_log decision on a fattened log: a peek (cost 0)
# and an admission (cost 1), each the mean of R EVALSHA calls as Redis
# itself counts them (INFO commandstats usec_per_call), on a log written
# with N entries one per request (the format every version reads), for the
# scripts here and, in the same run, those of a baseline revision.
#
#   bash bench/sliding_log.sh   # BASELINE=f6056ab (the last unbounded logs) R=500 N="128 1000 5600 10000"
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "bench/sliding_log.sh needs redis-server" >&2; exit 1; }
BASELINE=${BASELINE:-f6056ab}
R=${R:-500}
N=${N:-"128 1000 5600 10000"}

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
c() { redis-cli -p "$port" "$@"; }

mkdir -p "$work/baseline"
for f in common.lua sliding_log.lua decide.lua; do
  git show "$BASELINE:crates/store/lua/$f" >"$work/baseline/$f"
done

usec() { c info commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'; }
measure() { # measure LUA_DIR N: prints entries-after-first-call, peek us, admit us
  local sha state
  sha=$(cat "$1/common.lua" "$1/sliding_log.lua" "$1/decide.lua" | c -x script load)
  # Written on the store's clock, which then moves on as in production.
  local now; now=$(c time | paste -sd' ' | python3 -c 'import sys; s, us = map(int, sys.stdin.read().split()); print(s * 1000 + us // 1000)')
  state=$(python3 -c "print(str($now) + ''.join(';%d:1' % (i * 300) for i in reversed(range($2))))")
  c set k "$state" >/dev/null
  # One call first: a bounded log coalesces a long one once.
  c evalsha "$sha" 1 k "" 1000 sliding_log 0 10000 3600000 0 "" >/dev/null
  local entries; entries=$(c get k | tr -cd ';' | wc -c)
  c config resetstat >/dev/null
  c -r "$R" evalsha "$sha" 1 k "" 1000 sliding_log 0 10000 3600000 0 "" >/dev/null
  local peek; peek=$(usec)
  c config resetstat >/dev/null
  c -r "$R" evalsha "$sha" 1 k "" 1000 sliding_log 1 1000000 3600000 0 "" >/dev/null
  printf '%8s %12s %12s' "$entries" "$peek" "$(usec)"
}

printf '%-8s | %-34s | %-34s\n' "" "baseline $BASELINE" "this tree"
printf '%-8s | %8s %12s %12s | %8s %12s %12s\n' written entries "peek us" "admit us" entries "peek us" "admit us"
for n in $N; do
  printf '%-8s | %s | %s\n' "$n" "$(measure "$work/baseline" "$n")" "$(measure crates/store/lua "$n")"
done
