#!/usr/bin/env bash
# The memory store's keyed decision against governor's, in CPU time a
# decision: crates/store/examples/decisions.rs (gcra on tollgate's memory
# store, governor's keyed limiter; each on a simulated clock and on its
# real one: `SystemClock`, quanta), on one hot key and on a million keys.
# A shared machine slows a run, never speeds it up, so each row is the
# least CPU time (user + system) of ROUNDS runs, the contenders
# interleaved; set-up (a million keys made before the timed decisions, the
# clock's calibration) is taken out by timing two decision counts and
# dividing the difference. Prints ns a decision and tollgate ÷ governor.
#
#   bash bench/store_cpu.sh            # ROUNDS=7
#   BIN=/path/to/decisions bash bench/store_cpu.sh   # a build kept aside (A/B)
#
# Built as the release profile is (fat LTO), as the criterion bench
# (crates/store/benches/memory_store.rs) is.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p tollgate-store --example decisions
  bin=${CARGO_TARGET_DIR:-target}/release/examples/decisions
fi

python3 - "$bin" "$ROUNDS" <<'EOF'
import resource, subprocess, sys

binary, rounds = sys.argv[1], int(sys.argv[2])
# workload: (fewer, more) decisions timed
counts = {"hot": (5_000_000, 20_000_000), "many": (1_000_000, 4_000_000)}
contenders = ["tollgate-sim", "governor-sim", "tollgate-sys", "governor-sys"]

def cpu_seconds(contender, workload, n):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([binary, contender, workload, str(n)], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

least = {}
for _ in range(rounds):
    for workload, ns in counts.items():
        for contender in contenders:
            for n in ns:
                s = cpu_seconds(contender, workload, n)
                key = (contender, workload, n)
                least[key] = min(least.get(key, s), s)

print(f"least CPU of {rounds} rounds, ns a decision (set-up taken out)")
for workload, (few, many) in counts.items():
    per = {c: (least[(c, workload, many)] - least[(c, workload, few)]) / (many - few) * 1e9
           for c in contenders}
    for clock in ("sim", "sys"):
        t, g = per[f"tollgate-{clock}"], per[f"governor-{clock}"]
        print(f"{workload:5s} {clock}: tollgate {t:7.1f}  governor {g:7.1f}  ratio {t / g:.3f}")
EOF
