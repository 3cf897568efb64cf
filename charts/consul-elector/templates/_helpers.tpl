{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "consul-elector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: "<release>-<chart>", or the release name alone when it
already contains the chart name. Truncated to 63 characters (DNS label limit).
*/}}
{{- define "consul-elector.fullname" -}}
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

{{/*
Name and version of the chart, for the helm.sh/chart label.
*/}}
{{- define "consul-elector.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object of the release.
*/}}
{{- define "consul-elector.labels" -}}
helm.sh/chart: {{ include "consul-elector.chart" . }}
app.kubernetes.io/name: {{ include "consul-elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: consul-elector
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Seconds in a duration of whole units as the schema admits them ("1m30s", "15s", "2h").
*/}}
{{- define "consul-elector.seconds" -}}
{{- $seconds := 0 }}
{{- $units := dict "h" 3600 "m" 60 "s" 1 }}
{{- range $part := regexFindAll "[0-9]+[hms]" . -1 }}
{{- $unit := substr (sub (len $part) 1 | int) (len $part) $part }}
{{- $seconds = add $seconds (mul (trimSuffix $unit $part | atoi) (get $units $unit)) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/*
Selector labels of the operator pod. The component label keeps the consulDev pods (same name
and instance) out of the operator's selectors.
*/}}
{{- define "consul-elector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "consul-elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Selector labels of the consulDev pod.
*/}}
{{- define "consul-elector.consulDevSelectorLabels" -}}
app.kubernetes.io/name: {{ include "consul-elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: consul-dev
{{- end }}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "consul-elector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "consul-elector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's image: image.repository, its registry host replaced by image.registry when that
is set (a mirror; a repository without a host gets it as a prefix), then @image.digest when set,
else :image.tag (default: the chart's appVersion).
*/}}
{{- define "consul-elector.image" -}}
{{- $repository := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $parts := splitn "/" 2 $repository }}
{{- $host := $parts._0 }}
{{- if and $parts._1 (or (contains "." $host) (contains ":" $host) (eq $host "localhost")) }}
{{- $repository = printf "%s/%s" . $parts._1 }}
{{- else }}
{{- $repository = printf "%s/%s" . $repository }}
{{- end }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
Name of the consulDev Deployment and Service.
*/}}
{{- define "consul-elector.consulDevName" -}}
{{- printf "%s-consul-dev" (include "consul-elector.fullname" . | trunc 52 | trimSuffix "-") }}
{{- end }}

{{/*
The Consul address the operator uses: consul.address, else the consulDev Service, else empty
(the operator's default, 127.0.0.1:8500).
*/}}
{{- define "consul-elector.consulAddress" -}}
{{- if .Values.consul.address }}
{{- .Values.consul.address }}
{{- else if .Values.consulDev.enabled }}
{{- printf "http://%s.%s.svc:8500" (include "consul-elector.consulDevName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The operator's RBAC rules, read from files/ (the single source, also used by the integration
tests), with the Secret rule when rbac.secretAccess. The files are YAML lists at column 0, so
they can follow `rules:` as they are, comments included.
*/}}
{{- define "consul-elector.rbacRules" -}}
{{ .Files.Get "files/rbac-rules.yaml" | required "files/rbac-rules.yaml is missing from the chart" }}
{{- if .Values.rbac.secretAccess }}
{{ .Files.Get "files/rbac-secret-rules.yaml" | required "files/rbac-secret-rules.yaml is missing from the chart" }}
{{- end }}
{{- end }}

{{/*
The rule on the operator's own Lease (which replica writes), from files/ like the operator's
other rules; granted by a Role in the release namespace only.
*/}}
{{- define "consul-elector.leaseRules" -}}
{{ .Files.Get "files/rbac-lease-rules.yaml" | required "files/rbac-lease-rules.yaml is missing from the chart" }}
{{- end }}

{{/*
The rule that lets the operator read its default cluster name (the kube-system namespace's
UID), from files/ like the operator's other rules.
*/}}
{{- define "consul-elector.clusterIdentityRules" -}}
{{ .Files.Get "files/rbac-cluster-identity-rules.yaml" | required "files/rbac-cluster-identity-rules.yaml is missing from the chart" }}
{{- end }}

{{/*
Where the Consul Secrets are mounted in the operator container.
*/}}
{{- define "consul-elector.consulSecretsDir" -}}
/etc/consul-elector
{{- end }}

{{/*
Annotations of the pre-delete hook's objects: run before `helm uninstall` deletes anything,
in the order of "weight" (its ServiceAccount and rules first, then the Job); a previous
attempt's objects are replaced, and all are deleted once the hook succeeded.
*/}}
{{- define "consul-elector.uninstallHookAnnotations" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
