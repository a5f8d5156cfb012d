"""Explanations: why a pod, or a what-if claim, fits a node or not, and what claims and nodes hold.

Read-only views of the scheduling service's state, served over HTTP (``app.http``) and printed by the CLI
(``app.cli``): per node the verdict filter would give, the device funnel of every request
(``allocator.funnel``) and the allocation that would be chosen with its score.
"""
