#!/usr/bin/env bash
# Runs scripts/install.sh N times in a row (default 2) under `bash -x`, with every core kept
# busy, and fails at the first run that fails. The install must not depend on timing: the
# first run installs, later runs find everything in place, and none may flake under load.
#
#   ./scripts/check-install.sh                 # what CI runs (via scripts/test.sh)
#   ./scripts/check-install.sh 20 --fresh      # the longer check
#
# --fresh gives each run an empty etcd directory (QUORUM_ETCD_DIR), so every run downloads,
# unpacks and checks the 3.5.x binaries again: the path that once flaked on a new machine.
# (Debian's packages stay installed; the script only checks them.)
# The trace of each run goes to a log file; a failing run prints its last lines.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=2
fresh=0
for arg in "$@"; do
  case "$arg" in
    --fresh) fresh=1 ;;
    *) runs="$arg" ;;
  esac
done
case "$runs" in
  '' | *[!0-9]*) echo "usage: $0 [RUNS]  (RUNS: a positive whole number, got '$runs')" >&2; exit 2 ;;
esac
[ "$runs" -ge 1 ] || { echo "usage: $0 [RUNS]  (RUNS must be at least 1)" >&2; exit 2; }

# CPU load: one busy loop per core, each stopped by its own PID when this script ends,
# however it ends. Each loop also stops by itself after LOAD_LIMIT_S, so none can outlive
# a killed parent for long.
LOAD_LIMIT_S=1800
load_pids=()
stop_load() {
  local pid
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_load EXIT
cores="$(nproc)"
for _ in $(seq "$cores"); do
  ( end=$((SECONDS + LOAD_LIMIT_S)); while [ "$SECONDS" -lt "$end" ]; do :; done ) &
  load_pids+=("$!")
done

log_dir="$(mktemp -d)"
for i in $(seq "$runs"); do
  log="$log_dir/install-$i.log"
  start=$SECONDS
  env_args=()
  [ "$fresh" -eq 1 ] && env_args=("QUORUM_ETCD_DIR=$log_dir/etcd-$i")
  if env "${env_args[@]}" bash -x ./scripts/install.sh >"$log" 2>&1; then
    echo "check-install: run $i of $runs passed in $((SECONDS - start)) s (under load on $cores cores)"
  else
    rc=$?
    echo "check-install: run $i of $runs FAILED (exit $rc); the last lines of its trace ($log):" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  rm -rf "$log_dir/etcd-$i"
done
rm -rf "$log_dir"
echo "check-install: $runs of $runs runs passed under load"
