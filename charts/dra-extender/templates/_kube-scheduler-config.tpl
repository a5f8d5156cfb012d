{{/* The dedicated kube-scheduler's KubeSchedulerConfiguration (its ConfigMap: kube-scheduler-config.yaml). */}}
{{- define "dra-extender.kubeSchedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ include "dra-extender.scheduler" . }}        # the extender's --scheduler-lease
  # Failover (docs/operations.md "HA model"): a standby tries to take a released Lease every retryPeriod
  # to 2.2 x retryPeriod (client-go's jitter): 1 s instead of 2 lets it win over the restarted
  # kube-scheduler of a pair whose extender is down. The leader renews as often (one Lease write a second).
  retryPeriod: 1s
# 100 (the default): filter every node: the extender sees only the nodes kube-scheduler samples, and a
# node left out is a device left unused. The extender samples instead, among the nodes whose devices fit
# (its --percentage-of-nodes-to-score, adaptive by default as kube-scheduler's). Below 100 the extender
# retries a pod whose sample missed its devices (kubeScheduler.percentageOfNodesToScore).
percentageOfNodesToScore: {{ .Values.kubeScheduler.percentageOfNodesToScore }}
profiles:
- schedulerName: {{ include "dra-extender.scheduler" . }}
  plugins:
    multiPoint:
      disabled:
      - name: DynamicResources       # the extender allocates; two allocators would race for devices
    # ...but its PreEnqueue gate allocates nothing: it keeps a pod out of the queue until the ResourceClaims
    # it names exist (not being deleted, owned by the pod), as the in-tree profile does, so kube-scheduler
    # does not spend cycles and extender calls on pods whose claims the resourceclaim controller has not
    # created yet; its queueing hints requeue them when the claims appear (docs/performance.md).
    preEnqueue:
      enabled:
      - name: DynamicResources
  pluginConfig:
  - name: NodeResourcesFit
    args:
      # Extended resources backed by DRA (KEP-5004) are allocated by the extender, not counted against
      # node allocatable: every class's implicit name, plus each DeviceClass spec.extendedResourceName
      # (the chart's kubeScheduler.ignoredResources).
      ignoredResourceGroups:
      - deviceclass.resource.kubernetes.io
      {{- with .Values.kubeScheduler.ignoredResources }}
      ignoredResources:
      {{- toYaml . | nindent 6 }}
      {{- end }}
extenders:
- urlPrefix: http://127.0.0.1:8888/scheduler   # the sidecar, on the pod's loopback
  filterVerb: filter
  {{- if eq .Values.kubeScheduler.deviceScoring "prioritize" }}
  prioritizeVerb: prioritize
  # Scores are 0..10 x weight x 10; why 2 by default: docs/features.md "Scoring and device selection".
  weight: {{ .Values.kubeScheduler.extenderWeight }}
  {{- else }}
  # deviceScoring: filter: the extender passes on only the nodes with the best device score, and
  # kube-scheduler's own scores choose among them.
  {{- end }}
  bindVerb: bind
  # Preemption: kube-scheduler's dry run sees no devices; the extender keeps only the candidate nodes
  # where evicting lower-priority pods frees enough devices, adding the device holders to evict
  # (docs/features.md "Preemption").
  preemptVerb: preempt
  # A bind whose devices have binding conditions holds this call while the driver attaches them (the
  # extender's cluster.bindingTimeoutSeconds of extenderConfig, 600 s as kube-scheduler's bindingTimeout)
  # plus the bind's own writes (cluster.bindTimeoutSeconds, 20 s), so 10 s above the two: below that,
  # kube-scheduler gives up on a bind that is still going to succeed and retries the pod. Binds run in
  # kube-scheduler's binding goroutines; filter and prioritize answer within 3 s by the extender's own
  # budget, so the long timeout does not hold the scheduling queue.
  {{- $cluster := .Values.extenderConfig.cluster | default dict }}
  httpTimeout: {{ add (ceil (addf ($cluster.bindingTimeoutSeconds | default 600) ($cluster.bindTimeoutSeconds | default 20))) 10 }}s
  nodeCacheCapable: true             # node names only; the extender watches Nodes itself
  ignorable: false                   # a DRA allocator must fail closed
  # Loopback; for TLS see docs/operations.md "Cluster mode" (tlsConfig with a caFile).
  enableHTTPS: false
  # managedResources stays empty on purpose: kube-scheduler only sends a pod to an extender with
  # managedResources when a container requests one of them, and a pod that uses only
  # spec.resourceClaims requests none, so it would never reach the extender.
{{- end -}}
