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
{{- end }}

{{/* The restricted container security context shared by every pod of the chart. */}}
{{- define "pas.containerSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* The only route of the Ingress: the partner API prefix. */}}
{{- define "pas.ingressPaths" -}}
paths:
  - path: /partner/
    pathType: Prefix
    backend:
      service:
        name: {{ include "pas.fullname" . }}
        port:
          name: http
{{- end }}
