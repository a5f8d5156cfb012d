"""Errors raised by the allocator core.

Upstream's structured allocator keeps three outcomes apart: an allocation result, "no fit on this node",
and a fatal error that aborts the pod on every node. Only the last one is an exception here::

    AllocatorError                  fatal for the pod (upstream: Allocate returns an error)
    ├── InvalidInputError           bad class, claim or object shape (names the object and field)
    │   ├── FeatureDisabledError    a field is used whose feature gate is off
    │   └── CapacityRequestError    a capacity request past int64 range arithmetic, or a negative one
    ├── CELError                    selector problems
    │   ├── CELCompileError         the expression does not compile or is too long
    │   └── CELEvalError            a runtime error on one device (no such key, cost limit, non-bool)
    └── ClaimConstraintError        All-mode device breaks a claim constraint (upstream: fatal)

``NodeLocalError`` is separate: upstream's ``ErrFailedAllocationOnNode`` ("invalid resource pools were
encountered") fails only the node, so it is not an ``AllocatorError``. ``SearchTimeoutError``, a
``NodeLocalError``, is the search still running at its deadline (upstream: kube-scheduler's
``filterTimeout``, "timed out trying to allocate devices"); ``SearchLimitError`` is a search stopped at the
step budget its caller set. Neither is "fits" nor "cannot be satisfied".
"""

from __future__ import annotations

import copy
from typing import TypeVar

__all__ = [
    "AllocatorError",
    "CELCompileError",
    "CELError",
    "CELEvalError",
    "CapacityRequestError",
    "ClaimConstraintError",
    "FeatureDisabledError",
    "InvalidInputError",
    "NodeLocalError",
    "SearchLimitError",
    "SearchTimeoutError",
    "detached",
]

_Error = TypeVar("_Error", bound=BaseException)


def detached(error: _Error) -> _Error:
    """A copy of ``error`` to cache or to raise from a cache: no traceback (its frames hold the raising
    call's locals, the cache among them: a cycle), context or cause. Raise a fresh copy each time: an
    instance raised again chains every raise's frames, and their locals, onto its traceback."""
    return copy.copy(error)


class AllocatorError(Exception):
    """A fatal error: the pod cannot be scheduled on any node until its input changes."""


class InvalidInputError(AllocatorError):
    """An API object is malformed or references something that does not exist."""


class FeatureDisabledError(InvalidInputError):
    """A request uses a field whose feature gate is disabled (upstream wording)."""


class CapacityRequestError(InvalidInputError):
    """A capacity request the device's validRange arithmetic cannot represent (past MaxInt64 or the
    milli-value range), or a negative consumed capacity: upstream ``CmpRequestOverCapacity`` aborts the
    allocation rather than skipping the device (``allocator.capacity``)."""


class CELError(AllocatorError):
    """Base class of selector errors."""


class CELCompileError(CELError):
    """The expression does not compile, has the wrong result type, or exceeds 10 Ki characters."""


class CELEvalError(CELError):
    """Evaluating the expression on one device failed (runtime error, cost limit, non-bool result)."""


class ClaimConstraintError(AllocatorError):
    """An All-mode request lists a device that violates a claim constraint (upstream: fatal)."""


class NodeLocalError(Exception):
    """The node cannot be used because of a problem local to it (upstream ErrFailedAllocationOnNode)."""


class SearchLimitError(NodeLocalError):
    """The search tried the step budget its caller set without deciding (``Allocator.max_steps``)."""


class SearchTimeoutError(NodeLocalError):
    """The search was still running at its deadline (upstream: the filter timeout, default 10 s)."""
