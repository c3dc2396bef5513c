#!/usr/bin/env bash
# Installs everything into the dev namespace of the kind cluster:
#   1. PostgreSQL, Redis and the spend-management simulator (k8s-dev/manifests/*.yaml),
#   2. the Secrets values-dev.yaml refers to: DATABASE_URL, REDIS_URL and, when it does not exist
#      yet, the partner-keys Secret with one random key made now (printed once, below; never
#      written to a file in the repository),
#   3. the chart (helm upgrade --install with k8s-dev/values-dev.yaml: its HTTPRoute attaches to
#      the Gateway of create-cluster.sh, its pre-install hook runs the migrations), then `helm test`
#      and a wait until the Gateway has accepted the route,
#   4. for a new key: a network, an agent and two campaigns for it, and a curl line to try it.
# Re-running it upgrades the release and keeps the partner keys.
# Needs: kubectl, helm 3.17+ (or the repository's own after npm ci). See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need kubectl
helm="$(helm_bin)"

kubectl --context "$KUBE_CONTEXT" create namespace "$NAMESPACE" --dry-run=client --output yaml |
  kubectl --context "$KUBE_CONTEXT" apply --filename -

echo "dependencies: PostgreSQL, Redis, spend-management simulator"
k apply --filename k8s-dev/manifests/postgres.yaml --filename k8s-dev/manifests/redis.yaml \
  --filename k8s-dev/manifests/spend-simulator.yaml
for deployment in postgres redis spend-simulator; do
  k rollout status deployment "$deployment" --timeout=300s
done

echo "Secrets for DATABASE_URL and REDIS_URL"
k create secret generic "$DATABASE_SECRET" \
  --from-literal=url="postgres://postgres@postgres:5432/${DATABASE_NAME}" \
  --dry-run=client --output yaml | k apply --filename -
k create secret generic "$REDIS_SECRET" --from-literal=url="redis://redis:6379" \
  --dry-run=client --output yaml | k apply --filename -

new_key=""
network_id=""
if k get secret "$PARTNER_KEYS_SECRET" >/dev/null 2>&1; then
  echo "Secret ${PARTNER_KEYS_SECRET} exists; keeping its keys"
else
  echo "Secret ${PARTNER_KEYS_SECRET}: one new random partner key"
  new_key="pk_dev_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  network_id="$(new_uuid)"
  keys_file="$(mktemp)"
  trap 'rm -f "$keys_file"' EXIT
  chmod 600 "$keys_file"
  printf '{"partner-keys":{"%s":{"networkId":"%s","name":"kind-dev"}}}' "$new_key" "$network_id" >"$keys_file"
  k create secret generic "$PARTNER_KEYS_SECRET" --from-file=partner-keys.json="$keys_file"
  rm -f "$keys_file"
fi

if k get secret "$(release_fullname)-webhook-secrets-key" >/dev/null 2>&1; then
  echo "Secret $(release_fullname)-webhook-secrets-key exists; keeping it (the sealed signing secrets need it)"
else
  echo "Secret $(release_fullname)-webhook-secrets-key: a random key for the webhook signing secrets"
  k create secret generic "$(release_fullname)-webhook-secrets-key" \
    --from-literal=webhook-secrets-key="$(head -c 48 /dev/urandom | base64 | tr -d '\n')"
fi

echo "helm upgrade --install ${RELEASE}"
"$helm" upgrade --install "$RELEASE" charts/partner-agent-status \
  --kube-context "$KUBE_CONTEXT" --namespace "$NAMESPACE" \
  --values k8s-dev/values-dev.yaml --wait --timeout 5m
k rollout status deployment "$(release_fullname)" --timeout=300s
"$helm" test "$RELEASE" --kube-context "$KUBE_CONTEXT" --namespace "$NAMESPACE" --logs
k wait "httproute/$(release_fullname)" --timeout=120s \
  --for=jsonpath='{.status.parents[0].conditions[?(@.type=="Accepted")].status}'=True

if [ -n "$new_key" ]; then
  agent_id="us-east-1:$(new_uuid)"
  k exec deployment/postgres -- psql --quiet -v ON_ERROR_STOP=1 --username=postgres --dbname="$DATABASE_NAME" \
    --command="INSERT INTO networks (network_id) VALUES ('${network_id}');
               INSERT INTO agents (agent_id, network_id) VALUES ('${agent_id}', '${network_id}');
               INSERT INTO campaigns (campaign_id, agent_id) SELECT gen_random_uuid(), '${agent_id}' FROM generate_series(1, 2);"
  cat <<INFO

Partner key for network ${network_id} (shown once; it lives only in the Secret ${NAMESPACE}/${PARTNER_KEYS_SECRET}):

  ${new_key}

Try it (disables the demo agent and pauses its two campaigns):

  curl -i -X POST http://localhost:${GATEWAY_HTTP_PORT}/partner/agents/status \\
    -H 'content-type: application/json' -H 'x-api-key: ${new_key}' \\
    -d '{"agentId":"${agent_id}","enabled":false}'

INFO
fi
echo "installed; next: k8s-dev/run-e2e.sh"
