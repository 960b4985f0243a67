{{/*
Labels every object gets on top of its own app.kubernetes.io/name and component: the kustomize
manifests' part-of, and Helm's release labels.
*/}}
{{- define "gpu-admission.labels" -}}
app.kubernetes.io/part-of: gpu-admission
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "gpu-admission.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{- define "gpu-admission.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default "gpu-admission-policy" -}}
{{- end }}

{{/*
The policy digest the bundle's objects were rendered from, recomputed from a map of policy files the
way `gpu-admission policy render` computes it (webhook/render/chart.py: policy_digest).
*/}}
{{- define "gpu-admission.digest" -}}
{{- $canon := "" -}}
{{- range $name := keys . | sortAlpha -}}
{{- $canon = printf "%s%s\n%s\n" $canon $name (index $ $name) -}}
{{- end -}}
{{- sha256sum $canon -}}
{{- end }}

{{/*
The policy bundle as JSON, release namespace filled in: policy.bundle from values (`policy render
--helm-values`), else the chart's files/policy-bundle.json (`policy render --chart`). Refused when it
is not a bundle, or when its policy files are not the ones its objects were rendered from.
*/}}
{{- define "gpu-admission.bundle" -}}
{{- $text := "" -}}
{{- if .Values.policy.bundle -}}
{{- $text = toJson .Values.policy.bundle -}}
{{- else -}}
{{- $text = .Files.Get "files/policy-bundle.json" -}}
{{- end -}}
{{- if not $text -}}
{{- fail "gpu-admission: the chart has no files/policy-bundle.json and policy.bundle is empty: run `gpu-admission policy render --chart CHART_DIR POLICY_DIR` or give `-f` the output of `gpu-admission policy render --helm-values POLICY_DIR`" -}}
{{- end -}}
{{- $bundle := fromJson $text -}}
{{- if or (hasKey $bundle "Error") (ne (toString (index $bundle "format")) "1") -}}
{{- fail "gpu-admission: policy.bundle is not a bundle of format 1 from `gpu-admission policy render --helm-values POLICY_DIR` (re-render it with this chart's gpu-admission version)" -}}
{{- end -}}
{{- if ne (include "gpu-admission.digest" $bundle.files) $bundle.policyDigest -}}
{{- fail "gpu-admission: policy.bundle.files is not the policy its objects were rendered from (edited by hand?); re-render with `gpu-admission policy render --helm-values POLICY_DIR` so the webhook configurations and PriorityClasses follow the policy" -}}
{{- end -}}
{{- $text | replace (toString $bundle.namespacePlaceholder) .Release.Namespace -}}
{{- end }}

{{/* The availability mode the webhook configurations carry: in-tree only with the in-tree policies installed. */}}
{{- define "gpu-admission.availability" -}}
{{- if and .Values.inTree.enabled (eq .Values.inTree.availability "in-tree") -}}in-tree{{- else -}}webhook{{- end -}}
{{- end }}
