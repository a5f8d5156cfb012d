"""Cluster mode: the extender against a real API server.

* ``client``: the only module that talks to the Kubernetes API (kubernetes-asyncio, raw responses, orjson).
* ``informers``: list+watch per kind into ``app.state.cluster.ClusterState`` (bookmarks, 410 relist,
  deadlines).
* ``binder``: ``KubeBinder``, the bind writes (claims' finalizer and status, then the pod binding).
* ``reservations``: devices written by a bind stay reserved until the watch shows the write.
* ``recovery``: orphaned allocations (a bind that never bound its pod) released after a grace period.
* ``leader``: whether this replica sits next to the leading kube-scheduler (only then does it bind).
* ``conflicts``: devices another writer put in two claims, logged and counted.
* ``runtime``: the wiring, and the background thread ``serve`` runs it on.

Importing ``app.kube.client`` loads kubernetes-asyncio (about a second); nothing outside cluster mode does.
"""
