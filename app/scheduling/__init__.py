"""The extender's verbs on the cluster state, transport-free: filter, prioritize, bind and preempt.

``service`` (``SchedulingService``) holds the lock and composes the steps of one pod's scheduling cycle:
PreFilter (``claimsgate``), Filter and Score (``nodedecider`` with its ``decisioncache``), Reserve and
PreBind (``binding``, ``inflight``), over one ``cycle`` state. The rules the upstream DynamicResources
plugin applies around the allocator live beside them: extended resources backed by DRA, node-allocatable
resources, binding conditions, preemption, and the offline binder.
"""
