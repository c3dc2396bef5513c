#!/usr/bin/env bash
# Builds the service image from the repository's Dockerfile and loads it into the kind node (the
# cluster never pulls it: values-dev.yaml and the simulator manifest use pullPolicy Never). When
# the release is already installed, restarts its pods so they run the new image.
# Needs: docker (a running engine), kind, kubectl. See docs/qa.md.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source k8s-dev/lib.sh

need docker kind kubectl

docker build --tag "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

# The tag stays the same, so running pods keep the old image until they are replaced.
for deployment in spend-simulator "$(release_fullname)"; do
  if k get deployment "$deployment" >/dev/null 2>&1; then
    k rollout restart deployment "$deployment"
    k rollout status deployment "$deployment" --timeout=180s
  fi
done

echo "image ${IMAGE} is loaded into ${CLUSTER_NAME}"
echo "next: k8s-dev/install.sh"
