"""Settings and the config file: one frozen dataclass per concern (``settings``), the versioned
``ExtenderConfiguration`` file (``extenderconfig``, ``derivedconfig``: cluster-wide derived attributes,
reloaded on change) and the log format.
"""
