{{/* The chart name, overridable. */}}
{{- define "mro.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A fully qualified app name, at most 63 characters (DNS label). */}}
{{- define "mro.fullname" -}}
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

{{- define "mro.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mro.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mro.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mro.labels" -}}
helm.sh/chart: {{ include "mro.chart" . }}
{{ include "mro.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mro.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mro.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the operator-wide default token, or "" when there is none. */}}
{{- define "mro.tokenSecretName" -}}
{{- if .Values.credentials.existingSecret }}
{{- .Values.credentials.existingSecret }}
{{- else if .Values.credentials.token }}
{{- printf "%s-api-token" (include "mro.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* "true" when the release namespace's token Secret is not already readable through a broader rule. */}}
{{- define "mro.tokenSecretNeedsRole" -}}
{{- if include "mro.tokenSecretName" . }}
{{- if .Values.watchNamespaces }}
{{- if not (has .Release.Namespace .Values.watchNamespaces) }}true{{ end }}
{{- else if not .Values.rbac.secretsInEveryNamespace }}
{{- if not (has .Release.Namespace .Values.rbac.secretNamespaces) }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mro.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* What the operator itself needs on ManagedRunners, Events and (optionally) Secrets. */}}
{{- define "mro.applicationRules" -}}
# Application: list and watch ManagedRunners (kopf's watch stream and the runner-ID index); patch
# them to add and remove the finalizer (RBAC cannot narrow a patch to metadata.finalizers; the
# operator never writes spec).
- apiGroups: ["sandbox.coreweave.com"]
  resources: ["managedrunners"]
  verbs: ["list", "watch", "patch"]
# Application: write status (conditions, cloud state; removes status.kopf left by earlier releases).
- apiGroups: ["sandbox.coreweave.com"]
  resources: ["managedrunners/status"]
  verbs: ["patch"]
# Application: post Events on ManagedRunners (created, drift corrected, deleting, ...).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .secrets }}
{{ include "mro.secretRule" . }}
{{- end }}
{{- end }}

{{- define "mro.secretRule" -}}
# Application: read the Secrets a ManagedRunner names (spec.credentials, env), by name: never list or watch.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
# Application: keep the in-use finalizer on a ManagedRunner's credentials Secret, so deleting the namespace
# cannot take the token away before the runner is decommissioned.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["patch"]
{{- end }}
