"""The cluster's API objects: reading them from a state directory, converting them to
``resource.k8s.io/v1``, generating template claims as the resourceclaim controller does, and holding them
(``ClusterState``) beside the allocator's inventory. Which claims a pod and its PodGroup use is read here.
"""
