#!/usr/bin/env bash
# The tower layer's overhead in CPU time a request, in process: the apps of
# crates/tower/benches/layer.rs (bare axum, tollgate's layer on the
# embedded store with a token bucket and with GCRA, tower_governor without
# and with its own headers), each driven by `layer_bench MODE --calls N`
# on one thread. A shared machine slows a run, never speeds it up, so each
# row is the least CPU time (user + system) of ROUNDS runs, the rows
# interleaved; startup (the runtime, the clock's calibration) is taken out
# by timing two call counts and dividing the difference. Prints each row's
# nanoseconds a request, its overhead over bare axum, and the ratio of
# tollgate's overhead to tower_governor's with its headers (like for like:
# both write their fields on an admission).
#
#   bash bench/layer_cpu.sh            # ROUNDS=7, N=100000 and 400000
#   ROUNDS=11 bash bench/layer_cpu.sh
#   BIN=/path/to/layer_bench bash bench/layer_cpu.sh   # a build kept aside (A/B)
#
# Built with LTO off and 16 codegen units, as cargo's default release
# profile builds a service that depends on tollgate; LTO=fat builds it as
# the server is.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
FEW=${FEW:-100000}
MANY=${MANY:-400000}
. bench/lib.sh
trap stop_started EXIT
bin=$(layer_bench_bin)

python3 - "$bin" "$ROUNDS" "$FEW" "$MANY" <<'EOF'
import resource, subprocess, sys

binary, rounds, few, many = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
modes = ["bare", "tollgate", "tollgate-gcra", "governor", "governor-headers"]

def cpu_seconds(mode, calls):
    """User + system seconds of one `layer_bench MODE --calls N` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([binary, mode, "--calls", str(calls)], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

least = {}
for _ in range(rounds):
    for mode in modes:
        for calls in (few, many):
            seconds = cpu_seconds(mode, calls)
            least[(mode, calls)] = min(least.get((mode, calls), seconds), seconds)

per_request = {m: (least[(m, many)] - least[(m, few)]) / (many - few) * 1e9 for m in modes}
bare = per_request["bare"]
print(f"least CPU of {rounds} rounds, ({many} - {few} calls), ns a request")
for mode in modes:
    over = "" if mode == "bare" else f"  +{per_request[mode] - bare:.0f} over bare"
    print(f"{mode:18s} {per_request[mode]:7.0f}{over}")
governor = per_request["governor-headers"] - bare
for mode in ("tollgate", "tollgate-gcra"):
    print(f"{mode} / governor-headers overhead: {(per_request[mode] - bare) / governor:.3f}")
EOF
