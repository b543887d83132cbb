# Shared by the load harnesses (sourced from the repository's root). Servers
# started with `start` are recorded in a file, not a shell variable, since
# `$(start ...)` runs in a subshell; the caller's EXIT trap calls
# `stop_started`.

started=$(mktemp)

start() { # start CMD...; prints the base URL from the first stdout line
  local out; out=$(mktemp)
  "$@" >"$out" 2>/dev/null &
  echo $! >>"$started"
  for _ in $(seq 100); do
    if [ -s "$out" ]; then sed -n '1s/^listening on //p' "$out"; rm -f "$out"; return; fi
    sleep 0.05
  done
  echo "server did not start: $*" >&2; exit 1
}

stop_started() {
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$started"
  rm -f "$started"
}

layer_bench_bin() { # prints the tower layer's bench example: $BIN when set, else built
  # LTO off and 16 codegen units (LTO=fat builds it as the server is): as
  # cargo's default release profile builds a service that depends on tollgate.
  if [ -n "${BIN:-}" ]; then echo "$BIN"; return; fi
  if [ "${LTO:-off}" = off ]; then
    export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
  fi
  cargo build --release -q -p tollgate-tower --example layer_bench
  echo "${CARGO_TARGET_DIR:-target}/release/examples/layer_bench"
}
