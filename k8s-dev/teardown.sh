#!/usr/bin/env bash
# Removes the dev environment. By default deletes the whole kind cluster (everything goes with it).
# With --keep-cluster, only uninstalls the release and deletes the dev namespace (the cluster,
# Envoy Gateway and the dev Gateway stay, for a quick k8s-dev/install.sh).
# Needs: kind (or, with --keep-cluster, kubectl and helm). See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

case "${1:-}" in
  --keep-cluster)
    need kubectl
    helm="$(helm_bin)"
    "$helm" uninstall "$RELEASE" --kube-context "$KUBE_CONTEXT" --namespace "$NAMESPACE" || true
    kubectl --context "$KUBE_CONTEXT" delete namespace "$NAMESPACE" --ignore-not-found --wait=true
    echo "release ${RELEASE} and namespace ${NAMESPACE} removed; cluster ${CLUSTER_NAME} kept"
    ;;
  "")
    need kind
    kind delete cluster --name "$CLUSTER_NAME"
    ;;
  *)
    echo "usage: $0 [--keep-cluster]" >&2
    exit 2
    ;;
esac
