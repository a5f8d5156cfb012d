"""The explanation routes (``app.explain``), included by ``app.http.api.create_app``::

    GET  /api/v1/namespaces/{ns}/pods/{name}/explain[?node=N]   → PodExplanation
    GET  /api/v1/namespaces/{ns}/resourceclaims/{name}          → ClaimView
    GET  /api/v1/nodes/{name}/devices                           → NodeDevices
    POST /api/v1/explain[?node=N]   ResourceClaim | ResourceClaimTemplate (JSON or YAML) → WhatIfExplanation

One pod or what-if explanation at a time (each may search every node, holding the service lock per
node): a second one gets 429 with ``Retry-After``. Unknown objects get 404, bad what-if bodies 400 / 413
(a field the object's apiVersion does not have is one: ``unknown field "<path>"``, as kubectl's strict
field validation).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from app.explain.models import (
    BadObject,
    ClaimView,
    ErrorAnswer,
    NodeDevices,
    NotFound,
    PodExplanation,
    WhatIfExplanation,
)
from app.explain.pod import explain_pod
from app.explain.pod import what_if as explain_what_if
from app.explain.views import claim_view, node_devices_view
from app.http.bodies import BodyBudget, BodyRejected, read_body
from app.scheduling.service import SchedulingService

__all__ = ["explain_router"]


_T = TypeVar("_T")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"Error": message})


def _or_404(view: Callable[..., _T], *args: Any) -> _T | JSONResponse:
    """``view(*args)``, or the 404 answer when it raises NotFound."""
    try:
        return view(*args)
    except NotFound as e:
        return _error(404, str(e))


_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorAnswer, "description": "Unknown object"}}


_WHAT_IF_BODY = {
    "requestBody": {
        "required": True,
        "description": "One ResourceClaim or ResourceClaimTemplate (resource.k8s.io/v1), JSON or YAML.",
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


def explain_router(service: SchedulingService, max_body_bytes: int, budget: BodyBudget) -> APIRouter:
    """The read-only explanation routes over ``service`` (sync routes run in the thread pool)."""
    router = APIRouter(prefix="/api/v1", tags=["explain"])
    # One pod or what-if explanation at a time: each may search every node, and several in turn would
    # keep filter and bind waiting for the lock between their nodes. A second one is refused at once.
    running = threading.Lock()

    def alone(view: Callable[..., _T], *args: Any) -> _T | JSONResponse:
        if not running.acquire(blocking=False):
            answer = _error(429, "another explanation is running; retry when it is done")
            answer.headers["Retry-After"] = "1"
            return answer
        try:
            return _or_404(view, *args)
        except BadObject as e:
            return _error(e.status, str(e))
        finally:
            running.release()

    @router.get(
        "/namespaces/{namespace}/pods/{name}/explain",
        response_model=PodExplanation,
        responses=_NOT_FOUND,
        summary="Why a pod fits (or not) on each node, with device funnels, allocation and score",
    )
    def pod_explain(
        namespace: str,
        name: str,
        node: str | None = Query(None, description="explain only this node"),
    ) -> PodExplanation | JSONResponse:
        return alone(explain_pod, service, namespace, name, node)

    @router.get(
        "/namespaces/{namespace}/resourceclaims/{name}",
        response_model=ClaimView,
        responses=_NOT_FOUND,
        summary="A ResourceClaim as the extender sees it: allocation, status.devices, holders",
    )
    def get_claim(namespace: str, name: str) -> ClaimView | JSONResponse:
        return _or_404(claim_view, service, namespace, name)

    @router.get(
        "/nodes/{name}/devices",
        response_model=NodeDevices,
        responses=_NOT_FOUND,
        summary="A node's devices: attributes, capacity, taints and their source, holders, counters left",
    )
    def get_node_devices(name: str) -> NodeDevices | JSONResponse:
        return _or_404(node_devices_view, service, name)

    @router.post(
        "/explain",
        response_model=WhatIfExplanation,
        responses={
            400: {
                "model": ErrorAnswer,
                "description": "Not a ResourceClaim or ResourceClaimTemplate, or an unknown field",
            },
            413: {"model": ErrorAnswer, "description": "Body larger than max_body_bytes"},
            **_NOT_FOUND,
        },
        openapi_extra=_WHAT_IF_BODY,
        summary="What-if: where would this ResourceClaim or ResourceClaimTemplate fit now (nothing created)",
    )
    async def what_if(
        request: Request, node: str | None = Query(None, description="explain only this node")
    ) -> WhatIfExplanation | JSONResponse:
        try:
            body = await read_body(request, max_body_bytes, budget)
        except BodyRejected as e:
            refused = _error(e.status, e.message)
            refused.headers.update(e.headers)
            return refused
        # Parsed on a worker thread, in turn with the other explanations: a YAML body of megabytes takes
        # seconds, which on the event loop would hold every probe and filter.
        return await run_in_threadpool(alone, explain_what_if, service, body, node)

    return router
