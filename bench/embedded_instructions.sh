#!/usr/bin/env bash
# Instructions a decision and a request, counted by callgrind, for the two
# embedded measures of docs/benchmarks.md: the memory store's keyed
# decision against governor's (crates/store/examples/decisions.rs, one hot
# key, each on a simulated clock and on its real one), and the tower
# layer's overhead against tower_governor's (crates/tower/examples/
# layer_bench.rs, in-process calls on one thread). An instruction count
# does not move with the machine's load, so a shared machine gives the
# same figure twice; it is not time (a division, a cache miss or an
# atomic costs more than an add), which bench/store_cpu.sh and
# bench/layer_cpu.sh measure. Set-up is taken out by counting two run
# lengths and dividing the difference, and only the loop that decides or
# calls (the runtime's block_on) is counted (callgrind's
# --toggle-collect): the clocks' calibration runs a varying number of
# steps.
#
#   bash bench/embedded_instructions.sh
#   ROWS=store bash bench/embedded_instructions.sh   # or ROWS=layer
#
# The store's example is built as the release profile is (fat LTO), the
# layer's with LTO off (bench/lib.sh, as a service depending on tollgate
# is built; LTO=fat builds it as the server is).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench/embedded_instructions.sh needs valgrind: apt-get install -y valgrind" >&2; exit 1; }
ROWS=${ROWS:-all}
. bench/lib.sh

work=$(mktemp -d)
trap 'stop_started; rm -rf "$work"' EXIT

# instructions FILE: the total callgrind counted
instructions() { grep -h '^summary:' "$1" | awk '{s += $2} END {print s}'; }

# per_unit NAME COUNTED FEW MANY CMD...: instructions a unit inside the
# functions matching COUNTED, CMD run with FEW and MANY appended
per_unit() {
  local name=$1 counted_fn=$2 few=$3 many=$4; shift 4
  local counted=()
  for n in "$few" "$many"; do
    local out="$work/$(tr -c 'a-z0-9\n' _ <<<"$name").$n"
    valgrind --tool=callgrind --toggle-collect="$counted_fn" --callgrind-out-file="$out" "$@" "$n" >/dev/null 2>"$out.err" \
      || { echo "$name under valgrind failed: $(tail -3 "$out.err")" >&2; exit 1; }
    counted+=("$(instructions "$out")")
  done
  awk -v a="${counted[0]}" -v b="${counted[1]}" -v f="$few" -v m="$many" \
    'BEGIN {printf "%.0f\n", (b - a) / (m - f)}'
}

if [ "$ROWS" != layer ]; then
  cargo build --release -q -p tollgate-store --example decisions
  decisions=${CARGO_TARGET_DIR:-target}/release/examples/decisions
  echo "memory store, one hot key: instructions a decision"
  for clock in sim sys; do
    t=$(per_unit "tollgate-$clock" '*decisions*measured*' 100000 300000 "$decisions" "tollgate-$clock" hot)
    g=$(per_unit "governor-$clock" '*decisions*measured*' 100000 300000 "$decisions" "governor-$clock" hot)
    awk -v c="$clock" -v t="$t" -v g="$g" \
      'BEGIN {printf "  %s: tollgate %5d  governor %5d  ratio %.3f\n", c, t, g, t / g}'
  done
fi

if [ "$ROWS" != store ]; then
  bin=$(layer_bench_bin)
  echo "tower layer, in-process calls: instructions a request"
  declare -A per
  for mode in bare tollgate tollgate-gcra governor governor-headers; do
    per[$mode]=$(per_unit "$mode" '*Runtime::block_on*' 20000 60000 "$bin" "$mode" --calls)
    if [ "$mode" = bare ]; then
      printf "  %-18s %6d\n" "$mode" "${per[$mode]}"
    else
      printf "  %-18s %6d  +%d over bare\n" "$mode" "${per[$mode]}" $((${per[$mode]} - ${per[bare]}))
    fi
  done
  for mode in tollgate tollgate-gcra; do
    awk -v m="$mode" -v o=$((${per[$mode]} - ${per[bare]})) -v g=$((${per[governor-headers]} - ${per[bare]})) \
      'BEGIN {printf "  %s / governor-headers overhead: %.3f\n", m, o / g}'
  done
fi
