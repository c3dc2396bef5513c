#!/usr/bin/env bash
# Runs the Playwright suite (npm run test:e2e) against the dev cluster: the partner API through the
# Gateway (Envoy Gateway, the chart's HTTPRoute; BASE_URL=http://localhost:8080, and
# E2E_VIA_INGRESS=1 says "through the edge proxy", so the exposure spec checks what it routes),
# the seeder through port-forward.sh, partner keys added to the chart's Secret with kubectl.
# Extra arguments go to Playwright, e.g. k8s-dev/run-e2e.sh --grep 'disable'.
# Needs: kubectl, Node and npm (after npm ci), curl. See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need kubectl npm curl

k8s-dev/port-forward.sh &
forwarder=$!
stop_forwarding() {
  kill "$forwarder" 2>/dev/null || true
  wait "$forwarder" 2>/dev/null || true
}
trap stop_forwarding EXIT
wait_for_port "$PG_LOCAL_PORT" PostgreSQL
wait_for_port "$REDIS_LOCAL_PORT" Redis
wait_for_port "$SIMULATOR_LOCAL_PORT" "the simulator"

export BASE_URL="http://localhost:${GATEWAY_HTTP_PORT}"
export E2E_VIA_INGRESS=1
export E2E_DATABASE_URL="postgres://postgres@127.0.0.1:${PG_LOCAL_PORT}/${DATABASE_NAME}"
export E2E_REDIS_URL="redis://127.0.0.1:${REDIS_LOCAL_PORT}"
export E2E_REDIS_KEY_PREFIX="$REDIS_KEY_PREFIX"
export E2E_SIMULATOR_URL="http://127.0.0.1:${SIMULATOR_LOCAL_PORT}"
export E2E_PARTNER_KEYS_SECRET="$PARTNER_KEYS_SECRET"
export E2E_PARTNER_KEYS_SECRET_KEY="partner-keys.json"
export E2E_KUBE_NAMESPACE="$NAMESPACE"
export E2E_KUBE_CONTEXT="$KUBE_CONTEXT"
export E2E_SERVICE_POD_SELECTOR="app.kubernetes.io/instance=${RELEASE},app.kubernetes.io/component=api"

retry_until 30 2 "${BASE_URL}/partner/openapi.json does not answer: is the release installed (k8s-dev/install.sh)?" \
  curl --silent --fail --output /dev/null "${BASE_URL}/partner/openapi.json"

npm run test:e2e -- "$@"
