"""The binding-conditions wait of a bind (DRADeviceBindingConditions with DRAResourceClaimDeviceStatus),
as upstream's PreBind: every ``ClusterSettings.binding_poll_seconds`` the claims whose allocation has
result entries with ``bindingConditions`` are read from the API server until every condition type of each
such device is ``True`` in the claim's ``status.devices[]`` entry, failing on a ``True``
``bindingFailureConditions`` entry, a claim or reservation gone, or ``binding_timeout_seconds``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.config.settings import ClusterSettings
from app.kube.claimbodies import check_reserved, split_key, uid_of
from app.kube.client import KubeAPIError, NotFoundError, Resource
from app.kube.clock import Clock
from app.scheduling.binder import BindError, BindPlan
from app.scheduling.bindingconditions import device_label, failed_condition, not_true
from app.state.podclaims import pod_key

__all__ = ["Pending", "Wait", "await_binding_conditions"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Wait:
    """A claim of the pod whose allocation has result entries with binding conditions."""

    key: str
    uid: str
    results: tuple[Mapping[str, Any], ...]
    """The result entries with ``bindingConditions`` (the allocation cannot change while reserved)."""
    consumer: Mapping[str, Any] | None = None
    """The pod's PodGroup when the claim is reserved for it (``PodClaim.consumer``)."""


Pending = tuple[str, str, list[str]]
"""(claim key, device label, binding condition types not True yet)"""


async def await_binding_conditions(
    client: Any, claims: Resource, clock: Clock, settings: ClusterSettings, plan: BindPlan, waits: list[Wait]
) -> None:
    """Poll the claims in ``waits`` until every binding condition is True (module docstring).
    Raises BindError naming the claim, device and condition (failure, or timeout with what is missing)."""
    timeout = settings.binding_timeout_seconds
    pod_uid = uid_of(plan.pod)
    log.info(
        "bind pod=%s node=%s: waiting up to %gs for binding conditions of %s",
        pod_key(plan.pod),
        plan.node,
        timeout,
        ", ".join(wait.key for wait in waits),
    )
    pending: list[Pending] = [
        (wait.key, device_label(r), list(r["bindingConditions"])) for wait in waits for r in wait.results
    ]
    try:
        async with clock.timeout(timeout):
            while True:
                current: list[Pending] = []
                for wait in waits:
                    current.extend(await _binding_pending(client, claims, wait, pod_uid, pending))
                pending = current
                if not pending:
                    log.info("bind pod=%s: binding conditions met", pod_key(plan.pod))
                    return
                await clock.sleep(settings.binding_poll_seconds)
    except TimeoutError:
        key, device, missing = pending[0]
        others = len(pending) - 1
        more = f" (and {others} more device{'s' if others > 1 else ''})" if others else ""
        raise BindError(
            f"ResourceClaim {key}: device {device}: binding condition {', '.join(missing)} "
            f"not True after the binding timeout of {timeout:g}s{more}"
        ) from None


async def _binding_pending(
    client: Any, claims: Resource, wait: Wait, pod_uid: str, before: list[Pending]
) -> list[Pending]:
    """What of ``wait`` is not True yet, read from the API server. Raises BindError for a True failure
    condition, or when the claim or the pod's reservation is gone."""
    # A GET rather than the informer-fed index: right after our write the index may still show the
    # claim before it, and telling that stale copy from one whose reservation was removed meanwhile
    # would need ordering resourceVersions, which the API declares opaque. The server's copy is current
    # (and exists for a claim this bind just created), does not depend on the watch being healthy during a
    # wait of minutes, and costs one GET per waiting claim per poll.
    namespace, name = split_key(wait.key)
    try:
        claim = await client.get(claims, namespace, name)
    except NotFoundError as e:
        raise BindError(f"ResourceClaim {wait.key} was deleted while waiting for binding conditions") from e
    except KubeAPIError as e:
        # Transient (the API server restarting, a timeout): ask again at the next poll.
        log.warning("ResourceClaim %s: reading binding conditions: %s", wait.key, e)
        return [p for p in before if p[0] == wait.key]
    status = check_reserved(wait.key, claim, wait.uid, pod_uid, "during the wait", wait.consumer)
    pending: list[Pending] = []
    for result in wait.results:
        failed = failed_condition(status, result)
        if failed:
            raise BindError(f"ResourceClaim {wait.key}: device {device_label(result)}: {failed}")
        missing = not_true(status, result)
        if missing:
            pending.append((wait.key, device_label(result), missing))
    return pending
