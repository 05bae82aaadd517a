{{/*
The same tree as package render, written as Helm templates (the comparison baseline of the
generator benchmark). Every document starts with "# file: <path>" so the benchmark can compare
the output file by file with the Go render.
*/}}

{{- define "ip.tenantLabels" -}}
app.kubernetes.io/managed-by: inferplane
inferplane.io/tenant: {{ .t.name }}
{{- end -}}

{{- define "ip.jobLabels" -}}
{{ include "ip.tenantLabels" . }}
inferplane.io/job: {{ .j.name }}
{{- end -}}

{{- define "ip.replicaLabels" -}}
{{ include "ip.jobLabels" . }}
inferplane.io/replica: {{ .r | quote }}
{{- end -}}

{{- define "ip.nodeLabels" -}}
{{ include "ip.replicaLabels" . }}
inferplane.io/node-rank: {{ .n | quote }}
inferplane.io/role: {{ if eq .n 0 }}head{{ else }}worker{{ end }}
inferplane.io/node-type: {{ .j.nodeType }}
inferplane.io/runtime: {{ .j.runtime }}
inferplane.io/model-master: {{ .j.master }}
{{- if or (eq .n 0) (gt (int .j.dpLocal) 0) }}
inferplane.io/serving: "true"
{{- end }}
{{- end -}}

{{- define "ip.appSpec" -}}
destination:
  name: {{ .t.destination }}
  namespace: {{ .t.namespace }}
project: {{ .t.name }}
source:
  path: jobs/{{ .j.name }}
  repoURL: {{ .t.repoURL }}
  targetRevision: {{ .t.revision }}
syncPolicy:
  automated:
    prune: true
    selfHeal: true
  managedNamespaceMetadata:
    labels:
      {{- include "ip.tenantLabels" . | nindent 6 }}
  {{- include "ip.retry" . | nindent 2 }}
  syncOptions:
  - CreateNamespace=true
{{- end -}}

{{- define "ip.retry" -}}
retry:
  backoff:
    duration: 5s
    factor: 2
    maxDuration: 3m
  limit: 5
  refresh: true
{{- end -}}

{{- define "ip.addonsAppSpec" -}}
destination:
  name: {{ .t.destination }}
  namespace: {{ .a.namespace }}
ignoreDifferences:
- group: admissionregistration.k8s.io
  kind: ValidatingWebhookConfiguration
  jsonPointers:
  {{- range .a.caBundles }}
  - {{ . }}
  {{- end }}
project: {{ .t.name }}-addons
source:
  path: addons
  repoURL: {{ .t.repoURL }}
  targetRevision: {{ .t.revision }}
syncPolicy:
  automated:
    prune: true
    selfHeal: true
  {{- include "ip.retry" . | nindent 2 }}
  syncOptions:
  - ServerSideApply=true
  - RespectIgnoreDifferences=true
{{- end -}}

{{/* Shell quoting, as render.shellQuote. */}}
{{- define "ip.shq" -}}
{{- if regexMatch "^[a-zA-Z0-9_./:=,+@%-]+$" . -}}{{ . }}{{- else -}}'{{ replace "'" "'\\''" . }}'{{- end -}}
{{- end -}}

{{/* Shell quoting that lets $IFACE_NAME expand, as render.shellQuoteExpandIface. */}}
{{- define "ip.shqIface" -}}
{{- range $i, $p := regexSplit "\\$\\{IFACE_NAME\\}|\\$IFACE_NAME\\b" . -1 -}}
{{- if $i }}"$IFACE_NAME"{{ end }}{{ if $p }}{{ include "ip.shq" $p }}{{ end }}
{{- end -}}
{{- end -}}

{{- define "ip.launcher" -}}
{{- $t := .t }}{{ $j := .j }}{{ $o := .o }}{{ $r := .r }}{{ $n := .n -}}
#!/bin/bash
set -euo pipefail

# Model cache: the PVC-backed disk keeps downloaded weights across restarts.
cache_dev=/dev/disk/by-id/virtio-model-cache
mkdir -p /var/lib/inferplane/model-cache
blkid "$cache_dev" >/dev/null 2>&1 || mkfs.ext4 -q -L model-cache "$cache_dev"
mountpoint -q /var/lib/inferplane/model-cache || mount "$cache_dev" /var/lib/inferplane/model-cache

# Hugging Face token: the optional Secret {{ $o.hfTokenSecret }} (key "token"), attached as a disk; never written here.
if [ -e /dev/disk/by-label/hftoken ]; then
  mkdir -p /run/inferplane/hf-token
  mountpoint -q /run/inferplane/hf-token || mount -o ro /dev/disk/by-label/hftoken /run/inferplane/hf-token
fi
if [ -r /run/inferplane/hf-token/token ]; then
  HF_TOKEN="$(cat /run/inferplane/hf-token/token)"
  export HF_TOKEN
fi

{{ if gt (int $j.nodes) 1 -}}
# NCCL and Gloo talk over the fabric NIC (the second NIC; the first is the pod network).
IFACE_NAME="$(ip -o link show | awk -F': ' '$2 != "lo" {print $2}' | sed -n 2p)"
{{ else -}}
# The NIC of the default route, for any $IFACE_NAME in the master's env.
IFACE_NAME="$(ip -o -4 route show default | awk '{print $5; exit}')"
{{ end -}}
export IFACE_NAME

# The inference agent runs the model server's container, restarts it when it exits and
# writes its lines to the serial console (docs/agent.md).
exec /usr/local/bin/inferplane agent --name inferplane-model-server --health-url {{ if or (eq $n 0) (gt (int $j.dpLocal) 0) }}http://127.0.0.1:8000/health{{ else }}''{{ end }} \
  --all-gpus --ipc host --network host \
{{ if and (gt (int $j.nodes) 1) $j.ib -}}
{{ "  " }}--host-device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1 \
{{ end -}}
{{ "  " }}--volume /var/lib/inferplane/model-cache:/root/.cache/huggingface \
  --env HF_TOKEN \
{{ range $j.env -}}
{{ "  " }}--env {{ include "ip.shqIface" (printf "%s=%s" .name .value) }} \
{{ end -}}
{{- $args := list -}}
{{- if eq $j.runtime "vllm" -}}
{{ "  " }}--entrypoint vllm \
{{ $args = list "serve" $j.model -}}
{{- end -}}
{{- $args = concat $args (default list $j.args) -}}
{{- if and (gt (int $j.nodes) 1) (gt (int $j.dpLocal) 0) -}}
{{- $args = concat $args (list "--data-parallel-address" (printf "%s-r%d.%s.svc.%s" $j.name $r $t.namespace $o.clusterDomain) "--data-parallel-rpc-port" "29550") -}}
{{- if gt $n 0 }}{{ $args = concat $args (list "--data-parallel-start-rank" (toString (mul $n (int $j.dpLocal)))) }}{{ end -}}
{{- else if gt (int $j.nodes) 1 -}}
{{- $args = concat $args (list "--nnodes" (toString $j.nodes) "--node-rank" (toString $n) "--master-addr" (printf "%s-r%d.%s.svc.%s" $j.name $r $t.namespace $o.clusterDomain) "--master-port" "29501") -}}
{{- if gt $n 0 }}{{ $args = append $args "--headless" }}{{ end -}}
{{- end -}}
{{ "  " }}{{ include "ip.shq" $j.image }}
{{- $skip := false -}}
{{- range $i, $a := $args -}}
{{- if $skip -}}{{- $skip = false -}}{{- else }} \
    {{ include "ip.shq" $a }}
{{- if lt (add1 $i) (len $args) -}}
{{- $next := index $args (add1 $i) -}}
{{- if or (eq $a "serve") (and (hasPrefix "-" $a) (not (contains "=" $a)) (not (hasPrefix "-" $next))) }} {{ include "ip.shq" $next }}{{ $skip = true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end }}
{{ end -}}

{{- define "ip.unit" -}}
[Unit]
Description=inferplane model server ({{ .t.name }}/{{ .j.name }}-r{{ .r }}-n{{ .n }})
Wants=network-online.target
After=network-online.target docker.service
Requires=docker.service

[Service]
ExecStart=/usr/local/bin/inferplane-model-server
TimeoutStopSec=90
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
{{ end -}}

{{- define "ip.userdata" -}}
#cloud-config
# inferplane: tenant {{ .t.name }}, job {{ .j.name }}, replica {{ .r }}, node {{ .n }} of {{ .j.nodes }} ({{ if eq .n 0 }}head{{ else }}worker{{ end }}).
# Rendered from the job's plan and regenerated on every run: edit the inputs, not this.
write_files:
  - path: /usr/local/bin/inferplane-model-server
    permissions: "0755"
    content: |
{{ regexReplaceAll "(?m)^(.)" (include "ip.launcher" .) "      ${1}" }}  - path: /etc/systemd/system/inferplane-model-server.service
    content: |
{{ regexReplaceAll "(?m)^(.)" (include "ip.unit" .) "      ${1}" }}runcmd:
  - [systemctl, daemon-reload]
  - [systemctl, enable, --now, inferplane-model-server.service]
{{ end -}}
