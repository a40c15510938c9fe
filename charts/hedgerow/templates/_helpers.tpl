{{/* Chart name, truncated to a DNS label. */}}
{{- define "hedgerow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the operator's resources: <release>-<chart> unless overridden. */}}
{{- define "hedgerow.fullname" -}}
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

{{/* Labels that select the operator pod. */}}
{{- define "hedgerow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hedgerow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels on every object the chart renders. */}}
{{- define "hedgerow.labels" -}}
{{ include "hedgerow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hedgerow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hedgerow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hedgerow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
What the operator does inside a namespace it manages, and nothing more (see
operator/kube.py and handlers.py; tests/operator/test_rbac.py checks every request the operator
makes against these rules, and that every rule is used):
- EmbeddingServices: kopf lists and watches them and patches their annotations and status;
- children: get (is the name ours? the Deployments' status), a dry run then server-side apply
  (patch), create where apply-create is unavailable, delete for an HPA that autoscaling no
  longer wants (delete on the other kinds and update on embeddingservices/finalizers: see the
  rules below);
- KEDA ScaledObjects (spec.autoscaling.engine keda): as a child, and delete when keda is off;
- NetworkPolicies (spec.networkPolicy): as a child, and delete when it is turned off;
- pods: list server pods, patch pods/status for the readiness gate;
- PVCs: get, to report a missing model volume; Secrets: get, the one spec.tls names, to check
  its certificates; events: create.
*/}}
{{- define "hedgerow.namespacedRules" -}}
- apiGroups: [hedgerow.dev]
  resources: [embeddingservices]
  verbs: [list, watch, patch]
- apiGroups: [hedgerow.dev]
  resources: [embeddingservices/status]
  verbs: [patch]
# Children: read (name taken?), applied (a dry run first), the HPA deleted when autoscaling is
# turned off. `delete` on every child kind and `update` on embeddingservices/finalizers are
# what the OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) demands of
# whoever sets ownerReferences with blockOwnerDeletion.
- apiGroups: [hedgerow.dev]
  resources: [embeddingservices/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, create, patch, delete]
# spec.networkPolicy: the two NetworkPolicies applied, and deleted once it is off.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# spec.autoscaling.engine keda: the ScaledObject applied, and deleted once keda is off.
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# spec.gateway.apiKeySecret (its digest rolls the gateways on rotation) and spec.tls (its
# certificates are checked before any pod is written): read by name, never listed.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if gt (int .Values.operator.replicas) 1 }}
# Peering of the operator's replicas (kopf): the shared object read, watched and renewed.
- apiGroups: [kopf.dev]
  resources: [{{ if .Values.operator.watchNamespaces }}kopfpeerings{{ else }}clusterkopfpeerings{{ end }}]
  verbs: [list, watch, patch]
{{- end }}
{{- end }}
