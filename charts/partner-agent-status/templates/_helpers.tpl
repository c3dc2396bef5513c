{{/*
Names and labels shared by every template of the chart.
*/}}

{{- define "pas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the release name, with the chart name appended unless the release name already
contains it. Kubernetes names are limited to 63 characters.
*/}}
{{- define "pas.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name with a suffix, still within 63 characters. */}}
{{- define "pas.suffixedName" -}}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "pas.fullname" (index . 0) | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" }}
{{- end }}

{{- define "pas.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select this release's pods; never change them (selectors are immutable). */}}
{{- define "pas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector of the service pods (the test and migration pods have other components). */}}
{{- define "pas.apiSelectorLabels" -}}
{{ include "pas.selectorLabels" . }}
app.kubernetes.io/component: api
{{- end }}

{{/* Labels on every object. */}}
{{- define "pas.labels" -}}
helm.sh/chart: {{ include "pas.chart" . }}
{{ include "pas.selectorLabels" . }}
app.kubernetes.io/version: {{ include "pas.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: partner-agent-status
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "pas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pas.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pas.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* Image reference: repository:tag, or repository@digest when a digest is given. */}}
{{- define "pas.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "pas.imageTag" .) }}
{{- end }}
{{- end }}

{{- define "pas.testImage" -}}
{{- printf "%s:%s" .Values.tests.image.repository .Values.tests.image.tag }}
{{- end }}

{{/* Name of the Secret that holds partner-keys.json (file mode). */}}
{{- define "pas.partnerKeysSecretName" -}}
{{- if .Values.partnerKeys.existingSecret }}
{{- .Values.partnerKeys.existingSecret }}
{{- else }}
{{- include "pas.suffixedName" (list . "partner-keys") }}
{{- end }}
{{- end }}

{{/* The Secret holding the key the webhook signing secrets are sealed with. */}}
{{- define "pas.webhookSecretsKeySecretName" -}}
{{- if .Values.webhooks.secretsKey.existingSecret }}
{{- .Values.webhooks.secretsKey.existingSecret }}
{{- else }}
{{- include "pas.suffixedName" (list . "webhook-secrets-key") }}
{{- end }}
{{- end }}

{{- define "pas.webhookSecretsKeyFile" -}}
{{- printf "%s/webhook-secrets-key" (trimSuffix "/" .Values.webhooks.secretsKey.mountPath) }}
{{- end }}

{{- define "pas.partnerKeysFile" -}}
{{- printf "%s/partner-keys.json" (trimSuffix "/" .Values.partnerKeys.mountPath) }}
{{- end }}

{{/*
The checks a JSON schema cannot express. Included by the Deployment, so every render runs them.
*/}}
{{- define "pas.validate" -}}
{{- $v := .Values }}
{{- $planned := add (mul $v.lifecycle.preStopSleepSeconds 1000) $v.config.drainDelayMs $v.config.shutdownTimeoutMs }}
{{- if le (mul $v.lifecycle.terminationGracePeriodSeconds 1000) $planned }}
{{- fail (printf "lifecycle.terminationGracePeriodSeconds (%d s) must be greater than lifecycle.preStopSleepSeconds + (config.drainDelayMs + config.shutdownTimeoutMs) / 1000 = %d ms, or the kubelet kills pods with requests in flight" (int $v.lifecycle.terminationGracePeriodSeconds) (int $planned)) }}
{{- end }}
{{- if eq $v.partnerKeys.mode "file" }}
{{- if $v.partnerKeys.secretsManager.secretId }}
{{- fail "partnerKeys.secretsManager.secretId is set but partnerKeys.mode is file: the service takes exactly one key source; set partnerKeys.mode=secretsManager or clear the secret id" }}
{{- end }}
{{- if not $v.partnerKeys.existingSecret }}
{{- if not $v.partnerKeys.externalSecret.secretStoreRef.name }}
{{- fail "partnerKeys.externalSecret.secretStoreRef.name is required (or set partnerKeys.existingSecret)" }}
{{- end }}
{{- if not $v.partnerKeys.externalSecret.remoteRef.key }}
{{- fail "partnerKeys.externalSecret.remoteRef.key is required (or set partnerKeys.existingSecret)" }}
{{- end }}
{{- end }}
{{- else }}
{{- if not $v.partnerKeys.secretsManager.secretId }}
{{- fail "partnerKeys.secretsManager.secretId is required when partnerKeys.mode is secretsManager" }}
{{- end }}
{{- if $v.partnerKeys.existingSecret }}
{{- fail "partnerKeys.existingSecret is set but partnerKeys.mode is secretsManager: the service takes exactly one key source" }}
{{- end }}
{{- end }}
{{- if $v.autoscaling.enabled }}
{{- if gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" $v.database.poolSize) }}
{{- fail (printf "database.poolSize is replaced by database.maxConnections, the connections of a pod in all its pools together (the request pool had poolSize, the other pools 7 more): remove database.poolSize and set database.maxConnections: %d" (add (int $v.database.poolSize) 7)) }}
{{- end }}
{{- $pods := ternary $v.autoscaling.maxReplicas $v.replicaCount $v.autoscaling.enabled | int }}
{{- $migration := ternary 1 0 $v.migrations.enabled }}
{{- $needed := add (mul $pods (int $v.database.maxConnections)) $migration }}
{{- if gt (int $needed) (int $v.database.connectionBudget) }}
{{- fail (printf "database.connectionBudget (%d) is too small: %d pods (%s) x database.maxConnections (%d) + %d for the migration job = %d connections; lower database.maxConnections or the pod count, or raise the budget (docs/operations.md, \"Database connections\")" (int $v.database.connectionBudget) $pods (ternary "autoscaling.maxReplicas" "replicaCount" $v.autoscaling.enabled) (int $v.database.maxConnections) $migration (int $needed)) }}
{{- end }}
{{- if $v.podDisruptionBudget.enabled }}
{{- $hasMin := ne (toString $v.podDisruptionBudget.minAvailable) "" }}
{{- $hasMax := ne (toString $v.podDisruptionBudget.maxUnavailable) "" }}
{{- if eq $hasMin $hasMax }}
{{- fail "podDisruptionBudget: set exactly one of minAvailable and maxUnavailable (leave the other empty)" }}
{{- end }}
{{- if and $hasMin (not (kindIs "string" $v.podDisruptionBudget.minAvailable)) }}
{{- $replicas := ternary $v.autoscaling.minReplicas $v.replicaCount $v.autoscaling.enabled }}
{{- if ge (int $v.podDisruptionBudget.minAvailable) (int $replicas) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be below the replica count (%d), or no node could ever be drained" (int $v.podDisruptionBudget.minAvailable) (int $replicas)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.ingress.enabled (not $v.ingress.hosts) $v.ingress.tls }}
{{- fail "ingress.tls needs ingress.hosts: a TLS certificate is chosen by host name" }}
{{- end }}
{{- if $v.ingress.enabled }}
{{- range $i, $tls := $v.ingress.tls }}
{{- range $tls.hosts }}
{{- if not (has . $v.ingress.hosts) }}
{{- fail (printf "ingress.tls[%d] names host %s, which is not in ingress.hosts: the Ingress would not route it" $i .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if le (mul (int $v.ingress.proxyTimeoutSeconds) 1000) (int $v.config.requestDeadlineMs) }}
{{- fail (printf "ingress.proxyTimeoutSeconds (%d s) must be above config.requestDeadlineMs (%d ms): the controller would cut slow disables off with a 504 before the service answers" (int $v.ingress.proxyTimeoutSeconds) (int $v.config.requestDeadlineMs)) }}
{{- end }}
{{- range $name := list "nginx.ingress.kubernetes.io/proxy-read-timeout" "nginx.ingress.kubernetes.io/proxy-send-timeout" }}
{{- if hasKey $v.ingress.annotations $name }}
{{- fail (printf "ingress.annotations must not set %s: the chart sets it from ingress.proxyTimeoutSeconds" $name) }}
{{- end }}
{{- end }}
{{- range $name, $value := $v.ingress.annotations }}
{{- if and (hasPrefix "nginx.ingress.kubernetes.io/proxy-next-upstream" $name) (contains "non_idempotent" $value) }}
{{- fail (printf "ingress.annotations %s must not contain non_idempotent: a POST retried by the proxy would be counted twice against the partner's rate limit" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.httpRoute.enabled }}
{{- if not $v.httpRoute.parentRefs }}
{{- fail "httpRoute.parentRefs must name at least one Gateway when httpRoute.enabled is true" }}
{{- end }}
{{- if le (mul (int $v.httpRoute.requestTimeoutSeconds) 1000) (int $v.config.requestDeadlineMs) }}
{{- fail (printf "httpRoute.requestTimeoutSeconds (%d s) must be above config.requestDeadlineMs (%d ms): the Gateway would cut slow disables off with a 504 before the service answers" (int $v.httpRoute.requestTimeoutSeconds) (int $v.config.requestDeadlineMs)) }}
{{- end }}
{{- else if $v.httpRoute.clientRateLimit.enabled }}
{{- fail "httpRoute.clientRateLimit.enabled needs httpRoute.enabled: the BackendTrafficPolicy limits clients on the chart's HTTPRoute" }}
{{- end }}
{{- range $version, $d := $v.config.apiVersionDeprecations }}
{{- if $d.sunsetAt }}
{{- $rfc3339 := "2006-01-02T15:04:05Z07:00" }}
{{- if lt (toDate $rfc3339 $d.sunsetAt | unixEpoch | int64) (toDate $rfc3339 $d.deprecatedAt | unixEpoch | int64) }}
{{- fail (printf "config.apiVersionDeprecations.%s: sunsetAt (%s) must not be before deprecatedAt (%s)" $version $d.sunsetAt $d.deprecatedAt) }}
{{- end }}
{{- end }}
{{- end }}
{{- if gt (int $v.config.worker.backoffBaseMs) (int $v.config.worker.backoffMaxMs) }}
{{- fail "config.worker.backoffBaseMs must not exceed config.worker.backoffMaxMs" }}
{{- end }}
{{- include "pas.validateExtraEnv" . }}
{{- end }}

{{/*
extraEnv may neither repeat a name the chart sets (in env or in the ConfigMap) nor repeat itself.
Kubernetes server-side apply (Helm 4's default for new releases) rejects duplicate env names at
install time, and `helm template`/`helm lint` cannot see that: this makes every render fail instead.
*/}}
{{- define "pas.validateExtraEnv" -}}
{{- $builtin := keys (include "pas.configData" . | fromYaml) }}
{{- range (include "pas.env" . | fromYamlArray) }}
{{- $builtin = append $builtin .name }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $entry := .Values.extraEnv }}
{{- if has $entry.name $builtin }}
{{- fail (printf "extraEnv[%d].name %s is already set by the chart: set the chart value that renders it instead (values.yaml), not an extra entry" $i $entry.name) }}
{{- end }}
{{- if hasKey $seen $entry.name }}
{{- fail (printf "extraEnv[%d].name %s repeats an earlier extraEnv entry: give each variable once" $i $entry.name) }}
{{- end }}
{{- $_ := set $seen $entry.name true }}
{{- end }}
{{- end }}

{{/*
The service's plain environment: the ConfigMap's data, loaded with envFrom. The pod template
carries a checksum of it, so a change here rolls the pods.
*/}}
{{- define "pas.configData" -}}
{{- $c := .Values.config -}}
PORT: {{ .Values.ports.http | int64 | toString | quote }}
METRICS_PORT: {{ .Values.ports.metrics | int64 | toString | quote }}
LOG_LEVEL: {{ $c.logLevel | quote }}
DRAIN_DELAY_MS: {{ $c.drainDelayMs | int64 | toString | quote }}
SHUTDOWN_TIMEOUT_MS: {{ $c.shutdownTimeoutMs | int64 | toString | quote }}
REQUEST_DEADLINE_MS: {{ $c.requestDeadlineMs | int64 | toString | quote }}
OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: {{ $c.overloadMaxEventLoopDelayMs | int64 | toString | quote }}
OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: {{ $c.overloadUnauthenticatedUtilizationPercent | int64 | toString | quote }}
RATE_LIMIT_MAX: {{ $c.rateLimit.max | int64 | toString | quote }}
RATE_LIMIT_WINDOW_MS: {{ $c.rateLimit.windowMs | int64 | toString | quote }}
DISABLES_IN_FLIGHT_PER_NETWORK: {{ $c.disablesInFlightPerNetwork | int64 | toString | quote }}
IDEMPOTENCY_KEYS_PER_NETWORK: {{ $c.idempotencyKeysPerNetwork | int64 | toString | quote }}
{{- with $c.apiVersionDeprecations }}
API_VERSION_DEPRECATIONS: {{ toJson . | quote }}
{{- end }}
DISABLE_BATCHES_IN_FLIGHT: {{ $c.pipeline.disableBatchesInFlight | int64 | toString | quote }}
SPEND_MANAGEMENT_MAX_CONCURRENCY: {{ $c.pipeline.spendManagementMaxConcurrency | int64 | toString | quote }}
SPEND_MANAGEMENT_WORKER_MAX_WAIT_MS: {{ $c.pipeline.workerCallMaxWaitMs | int64 | toString | quote }}
WORKER_POLL_INTERVAL_MS: {{ $c.worker.pollIntervalMs | int64 | toString | quote }}
WORKER_LEASE_MS: {{ $c.worker.leaseMs | int64 | toString | quote }}
WORKER_BACKOFF_BASE_MS: {{ $c.worker.backoffBaseMs | int64 | toString | quote }}
WORKER_BACKOFF_MAX_MS: {{ $c.worker.backoffMaxMs | int64 | toString | quote }}
WORKER_CONCURRENCY: {{ $c.worker.concurrency | int64 | toString | quote }}
CLAIM_CHECK_MAX_AGE_MS: {{ $c.worker.claimCheckMaxAgeMs | int64 | toString | quote }}
SECRETS_MANAGER_CONNECT_TIMEOUT_MS: {{ $c.secretsManager.connectTimeoutMs | int64 | toString | quote }}
SECRETS_MANAGER_REQUEST_TIMEOUT_MS: {{ $c.secretsManager.requestTimeoutMs | int64 | toString | quote }}
SECRETS_MANAGER_MAX_ATTEMPTS: {{ $c.secretsManager.maxAttempts | int64 | toString | quote }}
DATABASE_MAX_CONNECTIONS: {{ .Values.database.maxConnections | int64 | toString | quote }}
DATABASE_STATEMENT_TIMEOUT_MS: {{ .Values.database.statementTimeoutMs | int64 | toString | quote }}
DATABASE_POOLER: {{ .Values.database.pooler | quote }}
REDIS_KEY_PREFIX: {{ .Values.redis.keyPrefix | quote }}
REDIS_COMMAND_TIMEOUT_MS: {{ .Values.redis.commandTimeoutMs | int64 | toString | quote }}
REDIS_CLUSTER: {{ .Values.redis.cluster | toString | quote }}
REDIS_WAIT_REPLICAS: {{ if kindIs "string" .Values.redis.waitReplicas }}{{ .Values.redis.waitReplicas | quote }}{{ else }}{{ .Values.redis.waitReplicas | int64 | toString | quote }}{{ end }}
REDIS_WAIT_TIMEOUT_MS: {{ .Values.redis.waitTimeoutMs | int64 | toString | quote }}
REDIS_REPLICATION_CHECK_INTERVAL_MS: {{ .Values.redis.replicationCheckIntervalMs | int64 | toString | quote }}
REDIS_FAILOVER_REASSERT_WINDOW_MS: {{ .Values.redis.failoverReassertWindowMs | int64 | toString | quote }}
SPEND_MANAGEMENT_URL: {{ .Values.spendManagement.url | quote }}
SPEND_MANAGEMENT_TIMEOUT_MS: {{ .Values.spendManagement.timeoutMs | int64 | toString | quote }}
BREAKER_CONSECUTIVE_FAILURES: {{ .Values.breaker.consecutiveFailures | int64 | toString | quote }}
BREAKER_ERROR_THRESHOLD_PERCENT: {{ .Values.breaker.errorThresholdPercent | int64 | toString | quote }}
BREAKER_VOLUME_THRESHOLD: {{ .Values.breaker.volumeThreshold | int64 | toString | quote }}
BREAKER_RESET_TIMEOUT_MS: {{ .Values.breaker.resetTimeoutMs | int64 | toString | quote }}
BREAKER_ROLLING_WINDOW_MS: {{ .Values.breaker.rollingWindowMs | int64 | toString | quote }}
{{- with .Values.events }}
{{- if .natsUrl }}
EVENTS_NATS_URL: {{ .natsUrl | quote }}
{{- end }}
EVENTS_STREAM: {{ .streamName | quote }}
EVENTS_SUBJECT_PREFIX: {{ .subjectPrefix | quote }}
EVENTS_CREATE_STREAM: {{ .createStream | toString | quote }}
EVENTS_SOURCE: {{ .source | quote }}
EVENTS_RETENTION_MS: {{ .retentionMs | int64 | toString | quote }}
EVENTS_FEED_RETENTION_DAYS: {{ .feed.retentionDays | int64 | toString | quote }}
EVENTS_FEED_MAX_STREAMS: {{ .feed.maxStreamsPerNetwork | int64 | toString | quote }}
{{- end }}
{{- with .Values.webhooks }}
WEBHOOK_SECRETS_KEY_FILE: {{ include "pas.webhookSecretsKeyFile" $ | quote }}
{{- if .allowedPorts }}
WEBHOOK_ALLOWED_PORTS: {{ join "," .allowedPorts | quote }}
{{- end }}
{{- if .dnsServers }}
WEBHOOK_DNS_SERVERS: {{ join "," .dnsServers | quote }}
{{- end }}
WEBHOOK_DNS_TIMEOUT_MS: {{ .dnsTimeoutMs | int64 | toString | quote }}
WEBHOOK_DNS_LOOKUPS_PER_NETWORK: {{ .dnsLookupsPerNetwork | int64 | toString | quote }}
WEBHOOK_NETWORK_MAX_PENDING: {{ .networkMaxPending | int64 | toString | quote }}
WEBHOOK_NETWORK_MAX_IN_FLIGHT: {{ .networkMaxInFlight | int64 | toString | quote }}
{{- end }}
{{- with .Values.nodeOptions }}
NODE_OPTIONS: {{ . | quote }}
{{- end }}
{{- if eq .Values.partnerKeys.mode "file" }}
PARTNER_KEYS_FILE: {{ include "pas.partnerKeysFile" . | quote }}
PARTNER_KEYS_POLL_INTERVAL_MS: {{ .Values.partnerKeys.pollIntervalMs | int64 | toString | quote }}
{{- else }}
PARTNER_KEYS_SECRET_ID: {{ .Values.partnerKeys.secretsManager.secretId | quote }}
PARTNER_KEYS_REFRESH_INTERVAL_MS: {{ .Values.partnerKeys.secretsManager.refreshIntervalMs | int64 | toString | quote }}
{{- with .Values.partnerKeys.secretsManager.region }}
AWS_REGION: {{ . | quote }}
{{- end }}
{{- end }}
OTEL_SDK_DISABLED: {{ not .Values.otel.enabled | toString | quote }}
OTEL_SERVICE_NAME: {{ .Values.otel.serviceName | quote }}
{{- if .Values.otel.enabled }}
OTEL_TRACES_SAMPLER: {{ .Values.otel.tracesSampler | quote }}
OTEL_TRACES_SAMPLER_ARG: {{ .Values.otel.tracesSamplerArg | toString | quote }}
{{- end }}
{{- with .Values.otel.exporterOtlpEndpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ . | quote }}
{{- end }}
# Metrics are served by the service itself (prom-client on METRICS_PORT); logs go to stdout.
OTEL_METRICS_EXPORTER: "none"
OTEL_LOGS_EXPORTER: "none"
{{- end }}

{{/* The service container's own env entries (the ones that are not plain values). */}}
{{- define "pas.env" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.urlSecret.name }}
      key: {{ .Values.database.urlSecret.key }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.urlSecret.name }}
      key: {{ .Values.redis.urlSecret.key }}
{{- if .Values.spendManagement.tokenSecret.name }}
- name: SPEND_MANAGEMENT_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.spendManagement.tokenSecret.name }}
      key: {{ .Values.spendManagement.tokenSecret.key }}
{{- end }}
{{- if .Values.otel.enabled }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
# $(VAR) expands only from variables defined earlier in the list.
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "service.version=%s,k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),k8s.node.name=$(NODE_NAME)" (include "pas.imageTag" .) | quote }}
{{- end }}
{{- end }}

{{/*
The port a URL points at: its explicit port, else 443 for https and 80 for http. Used to derive
NetworkPolicy egress ports from spendManagement.url and otel.exporterOtlpEndpoint.
*/}}
{{- define "pas.urlPort" -}}
{{- $url := urlParse . }}
{{- $hostPort := splitList ":" $url.host }}
{{- if gt (len $hostPort) 1 }}
{{- last $hostPort }}
{{- else if eq $url.scheme "https" }}
{{- 443 }}
{{- else }}
{{- 80 }}
{{- end }}
{{- end }}

{{/*
NetworkPolicy peers for a URL's host, when the host itself names the destination: an IP address
(that address alone), a Service in another namespace (<service>.<namespace>.svc[.<cluster
domain>]: that namespace) or a bare Service name (the release's own namespace). Any other host
(an external name) gives no peer. Prints a YAML list.
*/}}
{{- define "pas.urlPeers" -}}
{{- $host := (urlParse .).hostname | lower }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+){3}$" $host }}
- ipBlock:
    cidr: {{ printf "%s/32" $host }}
{{- else if contains ":" $host }}
- ipBlock:
    cidr: {{ printf "%s/128" $host }}
{{- else if regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $host }}
- podSelector: {}
{{- else if regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\\.svc(\\..+)?\\.?$" $host }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ index (splitList "." $host) 1 }}
{{- else }}
[]
{{- end }}
{{- end }}

{{/*
The port of a NATS server URL: its explicit port, else NATS's 4222.
*/}}
{{- define "pas.natsPort" -}}
{{- $hostPort := splitList ":" (urlParse .).host }}
{{- if gt (len $hostPort) 1 }}
{{- last $hostPort }}
{{- else }}
{{- 4222 }}
{{- end }}
{{- end }}

{{/*
Fails the render when an egress rule would reach any destination: no `to` peer at all, or an
ipBlock of a whole address family (/0). Called with (list allowAnyDestination valueName peers
what).
*/}}
{{- define "pas.refuseAnyDestination" -}}
{{- $allowed := index . 0 }}
{{- $value := index . 1 }}
{{- $peers := index . 2 }}
{{- $what := index . 3 }}
{{- if not $allowed }}
{{- if not $peers }}
{{- fail (printf "%s.to is empty: the NetworkPolicy would allow %s to any destination. Name the destination (ipBlock CIDRs, namespaceSelector and/or podSelector peers), or set networkPolicy.egress.allowAnyDestination=true to allow any destination on purpose" $value $what) }}
{{- end }}
{{- range $peers }}
{{- if and .ipBlock (hasSuffix "/0" .ipBlock.cidr) }}
{{- fail (printf "%s.to has ipBlock %s, which is any destination for %s. Name the destination's own CIDRs (e.g. the VPC endpoints' subnets), or set networkPolicy.egress.allowAnyDestination=true to allow any destination on purpose" $value .ipBlock.cidr $what) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The restricted container security context shared by every pod of the chart. */}}
{{- define "pas.containerSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* The only path of the Ingress and the HTTPRoute: the partner API prefix. */}}
{{- define "pas.partnerPathPrefix" -}}
/partner/
{{- end }}

{{/* The only route of the Ingress: the partner API prefix. */}}
{{- define "pas.ingressPaths" -}}
paths:
  - path: {{ include "pas.partnerPathPrefix" . }}
    pathType: Prefix
    backend:
      service:
        name: {{ include "pas.fullname" . }}
        port:
          name: http
{{- end }}
