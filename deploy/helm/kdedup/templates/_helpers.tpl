{{/* Chart name, truncated to the 63 characters DNS names allow. */}}
{{- define "kdedup.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name is used as is when it already contains the chart name. */}}
{{- define "kdedup.fullname" -}}
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

{{- define "kdedup.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kdedup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kdedup.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kdedup.labels" -}}
helm.sh/chart: {{ include "kdedup.chart" . }}
{{ include "kdedup.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kdedup.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kdedup.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
kdedup.capacity: DEDUP_WINDOW_CAPACITY, "auto" or a whole number of keys.
*/}}
{{- define "kdedup.capacity" -}}
{{- if eq (toString .Values.dedup.window.capacity) "auto" }}auto{{ else }}{{ .Values.dedup.window.capacity | int64 }}{{ end }}
{{- end }}

{{/*
kdedup.sizedKeys: the keys per interval, per filter, the memory is sized for: dedup.window.capacity,
or sizing.keysPerInterval when it is auto.
*/}}
{{- define "kdedup.sizedKeys" -}}
{{- if eq (include "kdedup.capacity" .) "auto" }}{{ .Values.sizing.keysPerInterval | int64 }}{{ else }}{{ include "kdedup.capacity" . }}{{ end }}
{{- end }}

{{/*
kdedup.filterMaxBytes: one filter's share of DEDUP_MEMORY_LIMIT, in bytes: its first stages at
the sized load (kdedup.sizedKeys), times sizing.growthHeadroom, the room it has to grow past it.

  filterMaxBytes = ceil(dedup.window.count x kdedup.sizedKeys x sizing.bitsPerKey / 8 x sizing.growthHeadroom)
*/}}
{{- define "kdedup.filterMaxBytes" -}}
{{- $generations := int .Values.dedup.window.count }}
{{- $bytes := mulf $generations (include "kdedup.sizedKeys" . | float64) .Values.sizing.bitsPerKey 0.125 .Values.sizing.growthHeadroom }}
{{- printf "%d" (int64 (ceil $bytes)) }}
{{- end }}

{{/*
kdedup.memoryLimit: DEDUP_MEMORY_LIMIT, the memory budget all of a replica's filters share, in
bytes: filters x kdedup.filterMaxBytes, filters = sizing.partitionsPerReplica (dedup.scope
partition, or routed: route partitions) or 1 (global). The busiest filters grow furthest while the budget lasts.
*/}}
{{- define "kdedup.memoryLimit" -}}
{{- $filters := 1 }}
{{- if ne .Values.dedup.scope "global" }}
{{- $filters = .Values.sizing.partitionsPerReplica }}
{{- end }}
{{- printf "%d" (mul (int64 $filters) (include "kdedup.filterMaxBytes" . | int64)) }}
{{- end }}

{{/*
kdedup.inputBytes: what one partition's reader may hold at worst, in bytes: sizing.fetchResponses
fetch responses of kafka.fetchMaxBytes, and one batch decompressed at the decode cap
(kafka.decodeMaxBytes, or its default: four times kafka.fetchMaxBytes, at least 16 MiB).
*/}}
{{- define "kdedup.inputBytes" -}}
{{- $fetch := int64 .Values.kafka.fetchMaxBytes }}
{{- $decode := int64 .Values.kafka.decodeMaxBytes }}
{{- if le $decode 0 }}
{{- $decode = max (mul 4 $fetch) 16777216 }}
{{- end }}
{{- printf "%d" (add (mul (int64 .Values.sizing.fetchResponses) $fetch) $decode) }}
{{- end }}

{{/*
kdedup.memory: memory per replica from the sizing formula, in Mi, rounded up: every filter at
its cap, every partition's input buffers (kdedup.inputBytes), plus the overhead.

  memory  = ceil((memoryLimit + partitionsPerReplica x inputBytes) / 2^20) + sizing.overheadMiB
*/}}
{{- define "kdedup.memory" -}}
{{- $bytes := include "kdedup.memoryLimit" . | float64 }}
{{- $bytes = addf $bytes (mulf .Values.sizing.partitionsPerReplica (include "kdedup.inputBytes" . | float64)) }}
{{- $mib := ceil (divf $bytes 1048576) }}
{{- printf "%dMi" (add (int64 $mib) (int64 .Values.sizing.overheadMiB)) }}
{{- end }}

{{/*
kdedup.bytes: a Kubernetes memory quantity (plain bytes, or with a suffix k, M, G, T, Ki, Mi, Gi,
Ti) in bytes.
*/}}
{{- define "kdedup.bytes" -}}
{{- $q := toString . }}
{{- $units := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 }}
{{- $n := regexFind "^[0-9.]+" $q }}
{{- $unit := trimPrefix $n $q }}
{{- if and $unit (not (hasKey $units $unit)) }}
{{- fail (printf "memory quantity %q: unit %q is not one of k, M, G, T, Ki, Mi, Gi, Ti" $q $unit) }}
{{- end }}
{{- mulf (float64 $n) (get $units $unit | default 1) | floor | int64 }}
{{- end }}

{{/*
kdedup.goMemLimit: GOMEMLIMIT in bytes, goMemLimitPercent of the container's memory limit (the
limit given, or the sizing formula's figure); empty when goMemLimitPercent is 0.
*/}}
{{- define "kdedup.goMemLimit" -}}
{{- $pct := .Values.goMemLimitPercent | int }}
{{- if gt $pct 0 }}
{{- $limit := .Values.resources.limits.memory | default (include "kdedup.memory" .) }}
{{- div (mul (include "kdedup.bytes" $limit | int64) $pct) 100 }}
{{- end }}
{{- end }}

{{/* kdedup.validate fails the render on combinations that cannot work. */}}
{{- define "kdedup.validate" -}}
{{- if and (eq .Values.dedup.scope "routed") (not .Values.kafka.routeTopic) }}
{{- fail "dedup.scope=routed needs kafka.routeTopic: the topic every record is routed through by its identity" }}
{{- end }}
{{- if and (ne .Values.dedup.scope "routed") .Values.kafka.routeTopic }}
{{- fail "kafka.routeTopic is only used with dedup.scope=routed" }}
{{- end }}
{{- if and (eq .Values.dedup.scope "global") (gt (int .Values.replicaCount) 1) }}
{{- fail "dedup.scope=global keeps one filter for the whole topic: replicaCount must be 1" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "enable only one of serviceMonitor and podMonitor, or every sample is scraped twice" }}
{{- end }}
{{- if and (eq .Values.checkpoint.store "s3") (not .Values.checkpoint.s3.bucket) }}
{{- fail "checkpoint.store=s3 needs checkpoint.s3.bucket (or use checkpoint.store=dir or none)" }}
{{- end }}
{{- if le (int .Values.terminationGraceMarginSeconds) 0 }}
{{- fail "terminationGraceMarginSeconds must be > 0 so the pod outlives SHUTDOWN_TIMEOUT" }}
{{- end }}
{{- with .Values.kafka.tls }}
{{- if and (or .caSecret .clientCertSecret .serverName) (not .enabled) }}
{{- fail "kafka.tls.caSecret, clientCertSecret and serverName need kafka.tls.enabled=true" }}
{{- end }}
{{- end }}
{{- with .Values.kafka.sasl }}
{{- if and (eq .mechanism "AWS_MSK_IAM") (not $.Values.kafka.tls.enabled) }}
{{- fail "kafka.sasl.mechanism=AWS_MSK_IAM needs kafka.tls.enabled=true (MSK serves IAM on its TLS listener, port 9098)" }}
{{- end }}
{{- if and (eq .mechanism "AWS_MSK_IAM") .credentialsSecret }}
{{- fail "kafka.sasl.mechanism=AWS_MSK_IAM signs with the pods' AWS credentials: unset kafka.sasl.credentialsSecret" }}
{{- end }}
{{- if and .mechanism (ne .mechanism "AWS_MSK_IAM") (not .credentialsSecret) }}
{{- fail (printf "kafka.sasl.mechanism=%s needs kafka.sasl.credentialsSecret (an existing Secret with the user name and password)" .mechanism) }}
{{- end }}
{{- if and (not .mechanism) .credentialsSecret }}
{{- fail "kafka.sasl.credentialsSecret needs kafka.sasl.mechanism" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
kdedup.kafkaSecretMounts: whether any Kafka Secret is mounted under /etc/kdedup/kafka.
*/}}
{{- define "kdedup.kafkaSecrets" -}}
{{- $r := .Values.schemaRegistry }}
{{- if or .Values.kafka.tls.caSecret .Values.kafka.tls.clientCertSecret .Values.kafka.sasl.credentialsSecret (and $r.url (or $r.credentialsSecret $r.caSecret $r.clientCertSecret)) }}true{{ end }}
{{- end }}

{{/*
kdedup.image: repository:tag, or repository@digest when image.digest is set (pinned).
*/}}
{{- define "kdedup.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}
