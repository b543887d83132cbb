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
