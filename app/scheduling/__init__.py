"""The extender's verbs on the cluster state, transport-free: filter, prioritize, bind and preempt.

``service`` (``SchedulingService``) resolves a pod's claims, keeps decisions per claims shape and node, and
holds the lock; the rules the upstream DynamicResources plugin applies around the allocator live beside
it: extended resources backed by DRA, node-allocatable resources, binding conditions, preemption, and the
offline binder.
"""
