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
# ingress-nginx release whose kind manifest create-cluster.sh applies (supports Kubernetes 1.29-1.33).
export INGRESS_NGINX_VERSION="${INGRESS_NGINX_VERSION:-controller-v1.13.3}"
# Host port of the ingress (kind-cluster.yaml maps the node's port 80 to it).
export INGRESS_HTTP_PORT="${INGRESS_HTTP_PORT:-8080}"

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

# The helm to use: the one on PATH, else the repository's own (npm ci installs a Linux binary).
helm_bin() {
  if command -v helm >/dev/null 2>&1; then
    command -v helm
  elif [ -x node_modules/.bin/helm ]; then
    echo node_modules/.bin/helm
  else
    echo "missing tool: helm (see docs/qa.md, 'What you need')" >&2
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
