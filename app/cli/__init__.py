"""The ``dra-extender`` command line: ``serve``, ``simulate``, ``explain``, ``validate``, ``completion``.

``main`` parses the flags and runs a command; the offline runtime (``runtime``) builds the scheduling
service from a state directory, cluster mode (``app.kube``) from a live API server.
"""
