#!/usr/bin/env bash
# Creates the kind cluster of k8s-dev/kind-cluster.yaml (unless it exists) and installs
# ingress-nginx (pinned: INGRESS_NGINX_VERSION in lib.sh), then waits until the controller is ready.
# Needs: docker (a running engine), kind, kubectl. See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need docker kind kubectl
docker info >/dev/null 2>&1 || { echo "the Docker engine is not running (docker info failed)" >&2; exit 1; }

# Not `kind get clusters | grep -q`: with pipefail, grep leaving early can fail the pipeline.
clusters="$(kind get clusters 2>/dev/null || true)"
if grep -qx "$CLUSTER_NAME" <<<"$clusters"; then
  echo "kind cluster ${CLUSTER_NAME} exists; keeping it"
else
  kind create cluster --name "$CLUSTER_NAME" --config k8s-dev/kind-cluster.yaml --wait 180s
fi

echo "installing ingress-nginx ${INGRESS_NGINX_VERSION}"
kubectl --context "$KUBE_CONTEXT" apply \
  --filename "https://raw.githubusercontent.com/kubernetes/ingress-nginx/${INGRESS_NGINX_VERSION}/deploy/static/provider/kind/deploy.yaml"
kubectl --context "$KUBE_CONTEXT" --namespace ingress-nginx rollout status deployment/ingress-nginx-controller --timeout=300s
# The admission webhook answers once the controller pod is ready; Ingress objects need it.
kubectl --context "$KUBE_CONTEXT" --namespace ingress-nginx wait pod \
  --for=condition=ready --selector=app.kubernetes.io/component=controller --timeout=300s

echo "cluster ${CLUSTER_NAME} is ready (context ${KUBE_CONTEXT}); ingress on http://localhost:${INGRESS_HTTP_PORT}"
echo "next: k8s-dev/build-and-load.sh"
