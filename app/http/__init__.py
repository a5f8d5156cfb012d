"""The HTTP shell: kube-scheduler's extender verbs, the explanation routes, metrics and probes.

``api`` builds the FastAPI app on a ``SchedulingService``; ``wire`` decodes and encodes the extender
protocol (``k8s.io/kube-scheduler/extender/v1``); ``bodies``, ``auth`` and ``server`` bound what a caller
may send and who may call; ``metrics`` and ``probes`` answer Prometheus and the kubelet.
"""
