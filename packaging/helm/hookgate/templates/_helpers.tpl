{{- define "hookgate.labels" -}}
app.kubernetes.io/name: hookgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
{{- end }}

{{- define "hookgate.selector" -}}
app.kubernetes.io/name: hookgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The pod's container, the same in both modes. */}}
{{- define "hookgate.container" -}}
- name: hookgate
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve", "--config", "/etc/hookgate/hookgate.yaml"]
  ports:
    - name: http
      containerPort: 8080
  env:
    - name: HOOKGATE_API_KEY
      valueFrom:
        secretKeyRef:
          name: {{ .Values.apiKey.existingSecret }}
          key: api-key
    {{- if eq .Values.mode "cluster" }}
    - name: HOOKGATE_DATABASE_URL
      valueFrom:
        secretKeyRef:
          name: {{ .Values.database.existingSecret }}
          key: url
    {{- end }}
    {{- if or (eq .Values.mode "cluster") .Values.encryption.existingSecret }}
    - name: HOOKGATE_ENCRYPTION_KEY
      valueFrom:
        secretKeyRef:
          name: {{ required "encryption.existingSecret: cluster mode needs the storage encryption key" .Values.encryption.existingSecret }}
          key: key
    {{- end }}
  # Ready: the node can take events (its store takes writes; on PostgreSQL, the database
  # answers). Alive: the process answers — a node that is not ready is left running, as it
  # recovers by itself once the disk or the database is back.
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
    periodSeconds: 5
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
    periodSeconds: 10
    failureThreshold: 6
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: config
      mountPath: /etc/hookgate
      readOnly: true
    - name: data
      mountPath: /data
{{- end }}
