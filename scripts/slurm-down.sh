#!/usr/bin/env bash
# Stop the daemons scripts/slurm-up.sh started (and only those), newest first, by their PID files.
set -uo pipefail
STATE=${LWNMT_SLURM_STATE:-/run/lwnmt-slurm-started}
[ -s "$STATE" ] || exit 0
tac "$STATE" | while read -r name pidfile; do
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  # A daemon killed without this script (a killed shell, a restarted container) leaves its PID file: stop the PID
  # only while it is still that daemon, never a process that reused the number.
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "[slurm-down] stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
rm -f "$STATE"
