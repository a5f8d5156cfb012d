{{/* The scheduler's name: its profile, Lease and most objects' names. */}}
{{- define "dra-extender.scheduler" -}}
{{- .Values.schedulerName -}}
{{- end -}}

{{/* What selects the scheduler pods (a Deployment's selector cannot change: kept as manifests/ had it). */}}
{{- define "dra-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-extender.scheduler" . }}
{{- end -}}

{{- define "dra-extender.labels" -}}
app.kubernetes.io/part-of: dra-extender
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* name=true,other=false from a map of gates, in name order. */}}
{{- define "dra-extender.gates" -}}
{{- $gates := list -}}
{{- range $name, $on := . -}}
{{- $gates = append $gates (printf "%s=%t" $name $on) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}

{{- define "dra-extender.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The ServiceAccount both containers run as. */}}
{{- define "dra-extender.subject" -}}
- kind: ServiceAccount
  name: {{ include "dra-extender.scheduler" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
