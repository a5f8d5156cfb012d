"""The admission webhook listener (``serve --webhook-bind-address``): ``admission.k8s.io/v1`` AdmissionReview.

Routes (the API server calls them over HTTPS; ``--webhook-certfile`` / ``--webhook-keyfile``, reloaded when
they change, as the main listener's, ``app.http.server``)::

    POST /mutate     AdmissionReview → 200 AdmissionReview: schedulerName patched for DRA pods
    POST /validate   AdmissionReview → 200 AdmissionReview: DRA pods of another scheduler refused
    GET  /healthz                    → 200 ok

Answers to pod creations are counted in ``dra_extender_admission_reviews_total{endpoint, outcome}``.

What is patched or refused: ``app.scheduling.admission``. A review that is not for a Pod CREATE is
allowed untouched. A body that is not an AdmissionReview (not JSON, wrong ``apiVersion``/``kind``, no
``request.uid``) gets 400 ``{"Error": "<the field>"}``; larger than ``--max-body-bytes`` 413. The answer
carries the request's ``uid``, as the API server requires. The listener runs on a thread of its own
(``ServerThread``): a webhook call never waits behind a filter on the extender's event loop, and reads
the DeviceClasses under the scheduling lock only for a pod requesting an extended resource.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from prometheus_client import Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.http.bodies import BodyBudget, read_body
from app.http.refusal import Refusal
from app.scheduling.admission import AdmissionDecision, mutate, validate
from app.scheduling.service import SchedulingService

__all__ = ["ADMISSION_API_VERSION", "create_webhook_app"]

log = logging.getLogger(__name__)

ADMISSION_API_VERSION = "admission.k8s.io/v1"
_JSON = "application/json"

Decide = Callable[[Mapping[str, Any], Sequence[str], Callable[[], Iterable[Any]] | None], AdmissionDecision]


def _field(obj: Any, name: str, kind: type, where: str) -> Any:
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise Refusal(400, f"{where}{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _parse_review(body: bytes) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview body. Raises Refusal (400) naming the field that is wrong."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise Refusal(400, f"AdmissionReview: not JSON: {e}") from None
    if not isinstance(review, dict):
        raise Refusal(400, f"AdmissionReview: expected an object, got {type(review).__name__}")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise Refusal(
            400,
            f"apiVersion, kind: expected {ADMISSION_API_VERSION} AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}",
        )
    request = _field(review, "request", dict, "")
    if not _field(request, "uid", str, "request."):
        raise Refusal(400, "request.uid: must not be empty")
    return request


def _answer(uid: str, decision: AdmissionDecision) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode()
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind") or {}
    return (
        request.get("operation") == "CREATE"
        and isinstance(kind, dict)
        and kind.get("group", "") == ""
        and kind.get("kind") == "Pod"
        and not request.get("subResource")
        and isinstance(request.get("object"), dict)
    )


def _device_classes(service: SchedulingService) -> Callable[[], list[Any]] | None:
    """The DeviceClasses of the index, read under the scheduling lock; None while DRAExtendedResource is
    off (no extended resource is DRA's then)."""
    if not service.state.gates.DRAExtendedResource:
        return None

    def classes() -> list[Any]:
        with service.lock:
            return list(service.state.objects["DeviceClass"].values())

    return classes


def create_webhook_app(
    service: SchedulingService,
    scheduler_names: Sequence[str],
    max_body_bytes: int,
    reviews: Counter | None = None,
) -> Starlette:
    """The webhook's ASGI app, deciding with ``service``'s DeviceClasses for the profiles
    ``scheduler_names`` (the first one is what a pod is patched to); ``reviews`` counts the answers to pod
    creations by endpoint and outcome (``Metrics.admission_reviews``)."""
    budget = BodyBudget(max_body_bytes)

    def endpoint(decide: Decide) -> Callable[[Request], Any]:
        async def review(request: Request) -> Response:
            try:
                admission = _parse_review(await read_body(request, max_body_bytes, budget))
            except Refusal as e:
                return Response(
                    orjson.dumps({"Error": e.message}),
                    e.status,
                    headers=getattr(e, "headers", None),
                    media_type=_JSON,
                )
            decision = AdmissionDecision()
            if _is_pod_create(admission):
                pod = admission["object"]
                decision = decide(pod, scheduler_names, _device_classes(service))
                outcome = "refused" if not decision.allowed else "patched" if decision.patch else "allowed"
                if reviews is not None:
                    reviews.labels(decide.__name__, outcome).inc()
                if decision.patch or not decision.allowed:
                    name = admission.get("name") or (pod.get("metadata") or {}).get("generateName") or ""
                    said = "schedulerName set" if decision.allowed else f"refused: {decision.message}"
                    log.info(
                        "admission %s: pod %s/%s: %s", decide.__name__, admission.get("namespace"), name, said
                    )
            return Response(orjson.dumps(_answer(admission["uid"], decision)), media_type=_JSON)

        return review

    async def healthz(_: Request) -> Response:
        return Response(b"ok", media_type="text/plain")

    return Starlette(
        routes=[
            Route("/mutate", endpoint(mutate), methods=["POST"]),
            Route("/validate", endpoint(validate), methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
