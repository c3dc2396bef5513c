#!/usr/bin/env bash
# Forwards the dev cluster's PostgreSQL, Redis and spend-management simulator to this machine for
# the e2e suite's seeder, until stopped (Ctrl-C, or SIGTERM from run-e2e.sh):
#   PostgreSQL 127.0.0.1:${PG_LOCAL_PORT}, Redis 127.0.0.1:${REDIS_LOCAL_PORT},
#   simulator  127.0.0.1:${SIMULATOR_LOCAL_PORT}
# The partner API itself is reached through the Gateway, not forwarded.
# Needs: kubectl. See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need kubectl

pids=()
stop() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
}
trap stop EXIT
trap 'exit 0' INT TERM

forward() {
  local service="$1" ports="$2"
  k port-forward --address 127.0.0.1 "service/${service}" "$ports" >/dev/null &
  pids+=("$!")
}

forward postgres "${PG_LOCAL_PORT}:5432"
forward redis "${REDIS_LOCAL_PORT}:6379"
forward spend-simulator "${SIMULATOR_LOCAL_PORT}:8080"

wait_for_port "$PG_LOCAL_PORT" PostgreSQL
wait_for_port "$REDIS_LOCAL_PORT" Redis
wait_for_port "$SIMULATOR_LOCAL_PORT" "the simulator"
echo "forwarding: PostgreSQL 127.0.0.1:${PG_LOCAL_PORT}, Redis 127.0.0.1:${REDIS_LOCAL_PORT}, simulator 127.0.0.1:${SIMULATOR_LOCAL_PORT} (Ctrl-C stops)"
wait
