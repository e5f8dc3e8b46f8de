{{/* The chart's name. */}}
{{- define "fieldwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the resources: the release name, with the chart name
appended unless it contains it (release "fieldwatch" gives "fieldwatch",
the names deploy/ uses).
*/}}
{{- define "fieldwatch.fullname" -}}
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

{{/* The labels of every resource. */}}
{{- define "fieldwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fieldwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the pods. */}}
{{- define "fieldwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fieldwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The service account's name. */}}
{{- define "fieldwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fieldwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository:tag, and @digest when one is given. */}}
{{- define "fieldwatch.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The ConfigMap of the rules. */}}
{{- define "fieldwatch.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "fieldwatch.fullname" .)) .Values.rules.existingConfigMap }}
{{- end }}

{{/* The ConfigMap of the metrics from fields' CustomResourceStateMetrics file, "" for none. */}}
{{- define "fieldwatch.metricsConfigMap" -}}
{{- if .Values.metrics.existingConfigMap }}{{ .Values.metrics.existingConfigMap }}{{ else if .Values.metrics.config }}{{ printf "%s-metrics-config" (include "fieldwatch.fullname" .) }}{{ end }}
{{- end }}

{{/* The audit receiver's TLS Secret. */}}
{{- define "fieldwatch.auditTLSSecret" -}}
{{- default (printf "%s-audit-tls" (include "fieldwatch.fullname" .)) .Values.audit.tlsSecret }}
{{- end }}

{{/* "true" when the admission webhook runs: admission.enabled, unless
audit.enabled without admission.alongsideAudit, or a namespaced install
(watchNamespaces: no cluster-wide rights) that would keep its certificate
itself. */}}
{{- define "fieldwatch.admission" -}}
{{- if and .Values.admission.enabled (or (not .Values.audit.enabled) .Values.admission.alongsideAudit) (or (not .Values.watchNamespaces) (ne .Values.admission.certificate.source "fieldwatch")) }}true{{ end }}
{{- end }}

{{/* "true" when the CRD guard runs: on the admission endpoint of a
cluster-wide install, crdGuard.mode not off. */}}
{{- define "fieldwatch.crdGuard" -}}
{{- if and (include "fieldwatch.admission" .) (ne .Values.crdGuard.mode "off") (not .Values.watchNamespaces) }}true{{ end }}
{{- end }}

{{/* The admission endpoint's TLS Secret. */}}
{{- define "fieldwatch.admissionTLSSecret" -}}
{{- if eq .Values.admission.certificate.source "secret" }}{{ .Values.admission.certificate.secretName }}{{ else }}{{ include "fieldwatch.fullname" . }}-admission-tls{{ end }}
{{- end }}

{{/*
A memory quantity (512Mi, 1G, 1.5Gi, or a number of bytes) in bytes, as
a float.
*/}}
{{- define "fieldwatch.bytes" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}
{{- float64 . }}
{{- else }}
{{- $q := toString . }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $unit := trimPrefix $num $q }}
{{- $mult := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 }}
{{- if or (not $num) (not (hasKey $mult $unit)) }}
{{- fail (printf "resources.limits.memory %q: want a number of bytes with an optional unit (Ki, Mi, Gi, Ti, k, M, G, T) to derive GOMEMLIMIT from" $q) }}
{{- end }}
{{- mulf (float64 $num) (get $mult $unit) }}
{{- end }}
{{- end }}

{{/*
The values that cannot work together, refused with a message that says
what to do.
*/}}
{{- define "fieldwatch.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: without it every replica delivers every change" }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.rbac.create .Values.rbac.clusterRules }}
{{- fail "watchNamespaces is set (a namespaced install, Roles only) but rbac.clusterRules is not empty: set rbac.clusterRules to [] and the Roles in rbac.namespaceRules; `fieldwatch rbac --rules FILE --namespaces a,b -o helm-values` prints them" }}
{{- end }}
{{- range $ns, $_ := .Values.rbac.namespaceRules }}
{{- if and $.Values.watchNamespaces (not (has $ns $.Values.watchNamespaces)) }}
{{- fail (printf "rbac.namespaceRules names namespace %s, which watchNamespaces does not: a namespaced install reads nothing outside them" $ns) }}
{{- end }}
{{- end }}
{{- if and .Values.history.port (eq (int .Values.history.port) (int .Values.httpPort)) }}
{{- fail "history.port is httpPort: set it to another port, or to 0 to serve the history on httpPort" }}
{{- end }}
{{- if and .Values.history.port .Values.audit.enabled (eq (int .Values.history.port) (int .Values.audit.port)) }}
{{- fail "history.port is audit.port: set it to another port" }}
{{- end }}
{{- if and (not .Values.rules.existingConfigMap) (not .Values.rules.inline) }}
{{- fail "rules.inline is empty and rules.existingConfigMap names no ConfigMap: fieldwatch needs a rules file" }}
{{- end }}
{{- if and (include "fieldwatch.admission" .) (eq .Values.admission.certificate.source "secret") (or (not .Values.admission.certificate.secretName) (not .Values.admission.certificate.caBundle)) }}
{{- fail "admission.certificate.source secret needs admission.certificate.secretName (tls.crt, tls.key) and admission.certificate.caBundle (its CA, PEM)" }}
{{- end }}
{{- if .Values.audit.enabled }}
{{- if eq .Values.audit.auth "clientCertificate" }}
{{- if not .Values.audit.clientNames }}
{{- fail "audit.auth clientCertificate needs audit.clientNames: the name (CN, or a DNS or URI SAN) of the apiserver's client certificate; without it every certificate of the CA could post audit events naming anyone" }}
{{- end }}
{{- else if eq .Values.audit.auth "token" }}
{{- if not .Values.audit.tokenSecret.name }}
{{- fail "audit.auth token needs audit.tokenSecret.name: the Secret holding the bearer token the apiserver sends" }}
{{- end }}
{{- else }}
{{- fail (printf "audit.auth %q: want clientCertificate or token" .Values.audit.auth) }}
{{- end }}
{{- end }}
{{- end }}
