#!/usr/bin/env bash
# Creates the kind cluster of k8s-dev/kind-cluster.yaml (unless it exists) and its way in, all
# pinned in lib.sh:
#   1. the Gateway API CRDs, standard channel, of GATEWAY_API_VERSION,
#   2. Envoy Gateway's own CRDs and Envoy Gateway itself (Helm chart, ENVOY_GATEWAY_VERSION), told
#      not to install Gateway API CRDs of its own,
#   3. the dev Gateway of k8s-dev/gateway/gateway.yaml, published on localhost:GATEWAY_HTTP_PORT,
# then waits until the Gateway is programmed. (ingress-nginx, used before, is retired upstream.)
# Needs: docker (a running engine), kind, kubectl, helm 3.17+ (or the repository's own after npm
# ci). See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need docker kind kubectl
docker info >/dev/null 2>&1 || { echo "the Docker engine is not running (docker info failed)" >&2; exit 1; }
helm="$(helm_bin)"

# Not `kind get clusters | grep -q`: with pipefail, grep leaving early can fail the pipeline.
clusters="$(kind get clusters 2>/dev/null || true)"
if grep -qx "$CLUSTER_NAME" <<<"$clusters"; then
  echo "kind cluster ${CLUSTER_NAME} exists; keeping it"
else
  kind create cluster --name "$CLUSTER_NAME" --config k8s-dev/kind-cluster.yaml --wait 180s
fi

kc() {
  kubectl --context "$KUBE_CONTEXT" "$@"
}

echo "Gateway API CRDs ${GATEWAY_API_VERSION} (standard channel)"
# Server-side: the CRDs are too large for the last-applied annotation of a client-side apply.
kc apply --server-side --force-conflicts \
  --filename "https://github.com/kubernetes-sigs/gateway-api/releases/download/${GATEWAY_API_VERSION}/standard-install.yaml"

echo "Envoy Gateway ${ENVOY_GATEWAY_VERSION}: its CRDs, then the controller"
"$helm" template eg-crds oci://docker.io/envoyproxy/gateway-crds-helm --version "$ENVOY_GATEWAY_VERSION" \
  --set crds.gatewayAPI.enabled=false --set crds.envoyGateway.enabled=true |
  kc apply --server-side --force-conflicts --filename -
"$helm" upgrade --install eg oci://docker.io/envoyproxy/gateway-helm --version "$ENVOY_GATEWAY_VERSION" \
  --kube-context "$KUBE_CONTEXT" --namespace "$GATEWAY_NAMESPACE" --create-namespace \
  --set crds.enabled=false --wait --timeout 5m
kc --namespace "$GATEWAY_NAMESPACE" wait deployment/envoy-gateway --for=condition=Available --timeout=300s

echo "Gateway ${GATEWAY_NAMESPACE}/${GATEWAY_NAME}"
kc apply --filename k8s-dev/gateway/gateway.yaml
kc --namespace "$GATEWAY_NAMESPACE" wait "gateway/${GATEWAY_NAME}" --for=condition=Programmed --timeout=300s

echo "cluster ${CLUSTER_NAME} is ready (context ${KUBE_CONTEXT}); Gateway on http://localhost:${GATEWAY_HTTP_PORT}"
echo "next: k8s-dev/build-and-load.sh"
