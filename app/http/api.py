"""The HTTP endpoint kube-scheduler calls: filter, prioritize and bind, plus health probes.

Routes (``urlPrefix: http://<host>:<port>/scheduler`` with verbs ``filter``, ``prioritize``, ``bind``)::

    POST /scheduler/filter       ExtenderArgs        → 200 ExtenderFilterResult
    POST /scheduler/prioritize   ExtenderArgs        → 200 [HostPriority]
    POST /scheduler/bind         ExtenderBindingArgs → 200 ExtenderBindingResult
    POST /scheduler/preempt      ExtenderPreemptionArgs → 200 ExtenderPreemptionResult
                                 (``app.scheduling.preemption``)
    GET  /healthz, /livez                            → 200 {"status": "ok"}: the process answers
    GET  /readyz                                     → 200 {"status": "ok"}; 503 while cluster mode syncs
    GET/POST /api/v1/...                             → explanations (``app.explain.pod``)

Status codes follow what kube-scheduler does with them (extender-protocol.md §3.4): any non-200 is a
scheduling error, and so is a 200 with ``Error`` set. Hence

* body larger than ``max_body_bytes`` → 413, malformed JSON or a wrong field type → 400, both with
  ``{"Error": "<message naming the field>"}`` and nothing decided;
* a fatal allocation error (invalid claim or class, CEL error, disabled feature) → 200 with ``Error``;
  "does not fit" is never an error, it is ``FailedNodes`` / ``FailedAndUnresolvableNodes``;
* a bind that cannot be done → 200 ``{"Error": "..."}`` (nothing was written);
* an unexpected exception → 500 ``{"Error": "internal error: ..."}``, logged with its traceback;
* in cluster mode, before every informer has listed once (``ready``): 200 with ``Error`` for filter and
  bind, ``[]`` for prioritize (a decision on a partial index could give a device in use to a second claim).

Bodies are read as raw bytes and decoded with orjson (``app.http.wire``); the pydantic models below only feed
the OpenAPI document at ``/docs`` and never validate a request (Pods are large; the wire module checks the
few fields the extender reads). The body is read in the event loop (size cap). Filter and prioritize
answer there too when the answer is warm (``SchedulingService.filter_quick`` / ``prioritize_quick``: the
lock is free, no search and few device checks remain), since a thread handoff costs more than that; every
other decision runs in the thread pool so probes stay responsive while a filter holds the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import orjson
from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from allocator.errors import AllocatorError
from allocator.scoring import FineScore
from app.config.settings import Settings
from app.http import wire
from app.http.auth import DelegatedAuth, DelegatedAuthMiddleware
from app.http.bodies import BodyBudget, BodyRejected, read_body
from app.http.explain import explain_router
from app.http.metrics import CONTENT_TYPE as METRICS_TYPE
from app.http.metrics import Metrics
from app.http.probes import ProbeListener
from app.scheduling.besttier import best_tier
from app.scheduling.binder import BindError
from app.scheduling.claimsgate import pod_uid
from app.scheduling.preemption import preempt
from app.scheduling.preemptionrequests import PreemptionRequests
from app.scheduling.requeue import RejectedPods
from app.scheduling.sampling import NodeSampler, SchedulerSample
from app.scheduling.service import FilterOutcome, SchedulingService, needs_no_devices

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_JSON = "application/json"
_SYNCING = "dra-extender is still syncing with the API server; try again"


# --- OpenAPI documentation models (never used to validate) ------------------------------------------------


class NodeList(BaseModel):
    """A core/v1 NodeList as kube-scheduler builds it: ``{"metadata": {}, "items": [Node, ...]}``."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(description="Full core/v1 Node objects (camelCase API form).")


class ExtenderArgs(BaseModel):
    """Request of filter and prioritize. Keys are Go field names, matched case-insensitively."""

    model_config = ConfigDict(extra="allow")
    Pod: dict[str, Any] = Field(description="The core/v1 Pod being scheduled; metadata.name is required.")
    Nodes: NodeList | None = Field(None, description="Candidates when nodeCacheCapable is false, else null.")
    NodeNames: list[str] | None = Field(
        None, description="Candidates when nodeCacheCapable is true, else null."
    )


class ExtenderFilterResult(BaseModel):
    """Filter response. Exactly one of Nodes / NodeNames is non-null, matching the request."""

    Nodes: NodeList | None = Field(description="Passing Node objects as received (nodeCacheCapable false).")
    NodeNames: list[str] | None = Field(description="Passing node names (nodeCacheCapable true).")
    FailedNodes: dict[str, str] = Field(description="node → reason; preemption may still consider the node.")
    FailedAndUnresolvableNodes: dict[str, str] = Field(description="node → reason; preemption cannot help.")
    Error: str = Field(description="Fatal error for the pod (scheduling error in kube-scheduler), or ''.")


class HostPriority(BaseModel):
    """One prioritize entry; kube-scheduler adds ``Score * weight * 10`` to the node's total."""

    Host: str
    Score: int = Field(ge=0, le=10)


class ExtenderBindingArgs(BaseModel):
    """Bind request: the pod (by name and UID) and the node kube-scheduler chose."""

    model_config = ConfigDict(extra="allow")
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(BaseModel):
    """Bind response: '' on success, else why nothing was bound."""

    Error: str


class MetaVictims(BaseModel):
    """Victims on one node by UID (``Pods``: ``[{"UID": ...}]``) and the PodDisruptionBudgets violated."""

    model_config = ConfigDict(extra="allow")
    Pods: list[dict[str, str]]
    NumPDBViolations: int


class ExtenderPreemptionArgs(BaseModel):
    """Preempt request: the preemptor and kube-scheduler's victims per candidate node (one of the maps)."""

    model_config = ConfigDict(extra="allow")
    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, dict[str, Any]] | None = Field(
        None, description="Victims as whole Pods (nodeCacheCapable false), else null."
    )
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = Field(
        None, description="Victims by UID (nodeCacheCapable true), else null."
    )


class ExtenderPreemptionResult(BaseModel):
    """Preempt response: the nodes where eviction frees enough devices, with the victims to evict there."""

    NodeNameToMetaVictims: dict[str, MetaVictims]


class ErrorBody(BaseModel):
    """Body of a 4xx/5xx answer: the request was not decided."""

    Error: str


class Health(BaseModel):
    status: str = "ok"


_REQUEST_MODELS: tuple[type[BaseModel], ...] = (ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs)


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {_JSON: {"schema": ref}}}}


def _errors() -> dict[int | str, dict[str, Any]]:
    return {
        400: {"model": ErrorBody, "description": "Malformed JSON or a field of the wrong type"},
        413: {"model": ErrorBody, "description": "Body larger than max_body_bytes"},
        500: {"model": ErrorBody, "description": "Unexpected internal error"},
    }


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """OpenAPI generator that also publishes the request models (referenced from ``openapi_extra``)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            _, defs = models_json_schema(
                [(m, "validation") for m in _REQUEST_MODELS], ref_template="#/components/schemas/{model}"
            )
            schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
            app.openapi_schema = schema
        return app.openapi_schema

    return build


# --- request handling -------------------------------------------------------------------------------------


def _json(content: bytes, status: int = 200) -> Response:
    return Response(content=content, status_code=status, media_type=_JSON)


_Outcome = TypeVar("_Outcome")


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's encoded answer."""

    body: bytes
    ok: bool
    """No ``Error`` set: the metrics' ``result``."""
    then: Callable[[], None] | None = None
    """Work for once the answer is written, on the event loop before the next request is read:
    kube-scheduler goes on meanwhile. Still inside ``VerbRoutes``' answering mark, so background work
    keeps stepping aside and the service lock stays free for it."""


async def _on_the_loop(work: Callable[[], None]) -> None:
    """``Answer.then`` as a response's background task: a coroutine, so Starlette runs it on the event
    loop rather than handing it to a worker thread. The answer is out already: a failure is only logged."""
    try:
        work()
    except Exception:
        log.exception("work after an answer failed")


def _decide(verb: str, handler: Callable[[Any], Answer | None], body: Any) -> tuple[Response, bool] | None:
    """Run one verb on a body: 200 with the encoded result, 400 on WireError, 500 on a bug, each with
    whether it succeeded; None when the handler declined (only the quick handlers do: their answer needs
    a worker thread)."""
    try:
        answer = handler(body)
        if answer is None:
            return None
        response = _json(answer.body)
        if answer.then is not None:
            response.background = BackgroundTask(_on_the_loop, answer.then)
        return response, answer.ok
    except wire.WireError as e:
        log.info("%s: bad request: %s", verb, e)
        return _json(wire.encode_error(str(e)), 400), False
    except Exception as e:
        log.exception("%s: internal error", verb)
        return _json(wire.encode_error(f"internal error: {type(e).__name__}: {e}"), 500), False


ANSWER_THREADS = 4
"""Worker threads for filter and prioritize answers that cannot be given on the event loop. One
kube-scheduler asks one at a time; the rest are for a restarted one whose abandoned calls still run."""


class _Limiter:
    """An anyio CapacityLimiter made on first use: it must be made inside the running event loop."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self._limiter: CapacityLimiter | None = None

    def get(self) -> CapacityLimiter:
        if self._limiter is None:
            self._limiter = CapacityLimiter(self.tokens)
        return self._limiter


def create_app(
    service: SchedulingService,
    settings: Settings,
    ready: Callable[[], bool] | None = None,
    auth: DelegatedAuth | None = None,
    metrics: Metrics | None = None,
    heartbeat: ProbeListener | None = None,
    rejected: RejectedPods | None = None,
    preemptions: PreemptionRequests | None = None,
) -> FastAPI:
    """The FastAPI application serving ``service``; ``settings.server.max_body_bytes`` caps request bodies.
    ``ready``: cluster mode's "every informer synced" (None: the state is complete from the start).
    ``auth``: who may call the scheduler and explanation routes (``app.http.auth``; None: anyone who can
    reach the port, the loopback default). ``metrics``: what ``/metrics`` exposes (None: the service's,
    without informers). ``heartbeat``: ticked by the event loop while the app runs, for the probe listener
    (``app.http.probes``). ``rejected``: where filter answers are recorded for the requeuer (cluster mode;
    ``app.scheduling.requeue``). ``preemptions``: where filter rejections and ``preemptVerb`` answers are
    recorded for the extender's own preemption (cluster mode; ``app.scheduling.preemptionrequests``)."""
    limit = settings.server.max_body_bytes
    # Four bodies of the largest size may be read at once (kube-scheduler sends one request at a time).
    budget = BodyBudget(4 * limit)
    metrics = metrics or Metrics(service)

    def cluster_nodes() -> int:
        return len(service.state.objects["Node"])

    scheduling = settings.scheduling
    scheduler_sample = SchedulerSample(scheduling.scheduler_percentage_of_nodes_to_score, cluster_nodes)
    best_only = scheduling.device_scoring == "filter"
    # Where kube-scheduler samples, its sample is what it scores: every node of it that fits goes back.
    # Where filter ranks, the best-scored nodes of all that fit are the cut (app.scheduling.besttier).
    sampled = scheduler_sample.percentage >= 100 and not best_only
    sampler = NodeSampler(scheduling.percentage_of_nodes_to_score if sampled else 100, cluster_nodes)

    # Swagger UI and ReDoc from the fastapi-offline package's files, not a CDN: /docs works air-gapped.
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if heartbeat is not None:
            heartbeat.start()
        # The first call imports anyio's event-loop backend and starts the worker thread: done here, not
        # inside the first pod's filter (about a tenth of a second on a busy 2-core node).
        await run_in_threadpool(lambda: None)
        yield

    app = FastAPIOffline(
        lifespan=lifespan,
        title="dra-extender",
        version="0.1.0",
        description="kube-scheduler HTTP extender allocating DRA devices (resource.k8s.io/v1). Wire format: "
        "k8s.io/kube-scheduler/extender/v1 (Go field names as keys).",
    )
    # FastAPI's documented way to extend the schema: replace the app's openapi method.
    app.openapi = _openapi(app)  # type: ignore[method-assign]

    def _asked(decide: Callable[..., _Outcome], args: wire.ExtenderArgs) -> _Outcome:
        """``service.filter`` or ``filter_quick`` on the request's pod and nodes."""
        names, nodes = args.candidate_names, args.nodes_by_name
        return decide(args.pod, names, nodes, sampler=sampler, names_text=args.node_names_text)

    def filter_(args: wire.ExtenderArgs) -> Answer:
        mark = rejected.mark() if rejected is not None else 0
        deadline = time.monotonic() + service.filter_time_budget  # one budget for the whole call
        outcome = sampler.sample(_asked(service.filter, args), args.candidate_names)
        scores = None
        if ranks(args.pod, outcome):
            scores = service.rank(args.pod, outcome.passed, args.nodes_by_name, deadline=deadline)
        return _filter_answer(args, outcome, mark, scores)

    def filter_quick(args: wire.ExtenderArgs) -> Answer | None:
        mark = rejected.mark() if rejected is not None else 0
        deadline = time.monotonic() + service.filter_time_budget
        outcome = _asked(service.filter_quick, args)
        if outcome is None or scheduler_sample.may_miss(outcome, len(args.candidate_names)):
            return None  # a miss is told by deciding the nodes outside the sample: a worker thread's job
        outcome = sampler.sample(outcome, args.candidate_names)
        scores = None
        if ranks(args.pod, outcome):
            scores = service.rank(args.pod, outcome.passed, args.nodes_by_name, deadline=deadline, quick=True)
            if scores is None:
                return None
        return _filter_answer(args, outcome, mark, scores)

    def ranks(pod: wire.Obj, outcome: FilterOutcome) -> bool:
        """Whether filter ranks the nodes it passes on (``device_scoring: filter``): more than one, for a
        pod with devices (one without has no device score)."""
        return best_only and len(outcome.passed) > 1 and not needs_no_devices(pod)

    def _filter_answer(
        args: wire.ExtenderArgs, outcome: FilterOutcome, mark: int, scores: list[FineScore | None] | None
    ) -> Answer:
        """The answer for ``outcome``, sampled already; ``scores``: the fine device score of each node it
        passes (None: not scored in time), when filter passes on only the best-scored
        (``app.scheduling.besttier``)."""
        then = None
        if scores is not None:
            passed, attempt = outcome.passed, service.scored_attempt(args.pod)
            outcome = dataclasses.replace(outcome, passed=best_tier(passed, scores))
            if None not in scores:
                # As after prioritize's answer: the strictly best node's devices held until the bind.
                known = cast(list[FineScore], scores)
                then = functools.partial(service.hold_best, args.pod, passed, known, attempt)
        names = args.candidate_names
        missed = scheduler_sample.miss(
            pod_uid(args.pod), outcome, len(names), lambda: service.fits_outside(args.pod, names)
        )
        if missed is not None:
            outcome = missed
            metrics.sample_misses.inc()
            log.debug(
                "filter: kube-scheduler's sample of %d nodes has no devices for the pod, another node "
                "has: retried at once",
                len(names),
                extra={"pod": _pod_ref(args.pod)},
            )
        if rejected is not None:
            rejected.filtered(args.pod, outcome, mark, retry_now=missed is not None)
        if preemptions is not None:
            preemptions.filtered(args.pod, outcome)
        log.debug(
            "filter: %d nodes, %d passed on, error %r",
            len(args.candidate_names),
            len(outcome.passed),
            outcome.error,
            extra={"pod": _pod_ref(args.pod)},
        )
        metrics.observe_filter(len(outcome.passed), len(outcome.failed), len(outcome.unresolvable))
        return Answer(wire.encode_filter_result(args, outcome), not outcome.error, then)

    def prioritize(args: wire.ExtenderArgs) -> Answer:
        names = args.candidate_names
        return _scored(args, service.prioritize(args.pod, names, args.nodes_by_name))

    def prioritize_quick(args: wire.ExtenderArgs) -> Answer | None:
        names = args.candidate_names
        scores = service.prioritize_quick(args.pod, names, args.nodes_by_name)
        return None if scores is None else _scored(args, scores)

    def _scored(args: wire.ExtenderArgs, scores: list[int]) -> Answer:
        names = args.candidate_names
        attempt = service.scored_attempt(args.pod)
        return Answer(
            wire.encode_host_priorities(names, scores),
            True,
            then=lambda: service.hold_best(args.pod, names, scores, attempt),
        )

    quick_handlers = {"filter": filter_quick, "prioritize": prioritize_quick}
    # Decoded on the event loop: the bind's for its early Reserve there. preempt's may carry whole pods per
    # node and is decoded by its handler, on a worker thread.
    decoders: dict[str, Callable[[bytes], Any]] = {
        "filter": wire.decode_extender_args,
        "prioritize": wire.decode_extender_args,
        "bind": wire.decode_binding_args,
    }

    def bind(args: wire.ExtenderBindingArgs) -> Answer:
        pod = {"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node}
        try:
            bound = service.bind_outcome(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except (BindError, AllocatorError) as e:
            log.warning("bind failed", extra={**pod, "reason": str(e)})  # klog: the message, then the keys
            metrics.binds.labels("error").inc()
            return Answer(wire.encode_binding_result(str(e)), False)
        log.info("bound: %s", bound.summary(), extra={**pod, "devices": bound.devices})
        metrics.binds.labels("success").inc()
        return Answer(wire.encode_binding_result(), True)

    def preempt_(body: bytes) -> Answer:
        args = wire.decode_preemption_args(body)
        pod = {"pod": _pod_ref(args.pod)}
        try:
            kept = preempt(service, args.pod, args.victims, args.sent_pods)
        except AllocatorError as e:
            # Like a filter's fatal error: preemption is not tried, the pod stays unschedulable.
            log.info("preempt failed: %s", e, extra=pod)
            return Answer(wire.encode_preemption_result({}), False)
        log.debug("preempt: %d candidate nodes, %d kept", len(args.victims), len(kept), extra=pod)
        if kept and preemptions is not None:
            preemptions.scheduler_preempting(args.pod)
        return Answer(wire.encode_preemption_result(kept), True)

    first = service.answer_first
    answer_threads = _Limiter(ANSWER_THREADS)

    async def run(verb: str, handler: Callable[[Any], Answer], request: Request) -> Response:
        start = time.perf_counter()
        response, ok = await answer(verb, handler, request)
        metrics.observe_request(verb, ok, time.perf_counter() - start)
        return response

    async def answer(verb: str, handler: Callable[[Any], Answer], request: Request) -> tuple[Response, bool]:
        try:
            body = await read_body(request, limit, budget)
        except BodyRejected as e:
            log.info("%s: rejected: %s", verb, e.message)
            refused = _json(wire.encode_error(e.message), e.status)
            refused.headers.update(e.headers)
            return refused, False
        except ClientDisconnect:
            # kube-scheduler gave up (httpTimeout); nobody reads this answer and nothing was decided.
            log.info("%s: client disconnected before sending the whole body", verb)
            return _json(wire.encode_error("client disconnected"), 400), False
        if ready is not None and not ready():
            log.info("%s: refused: still syncing with the API server", verb)
            return _json(b"[]" if verb == "prioritize" else wire.encode_error(_SYNCING)), False
        decode = decoders.get(verb)
        try:
            args = decode(body) if decode is not None else body
        except wire.WireError as e:
            log.info("%s: bad request: %s", verb, e)
            return _json(wire.encode_error(str(e)), 400), False
        quick = quick_handlers.get(verb)
        if quick is None:
            with reserved_early(verb, args):
                return cast(tuple[Response, bool], await run_in_threadpool(_decide, verb, handler, args))
        # kube-scheduler's cycle waits on these answers: background work steps aside meanwhile (AnswerFirst,
        # marked by VerbRoutes around the whole request). A warm answer (no claims, or a few nodes to
        # re-decide) costs less than the thread handoff, so it is given right here; anything that could
        # hold the event loop goes to a worker thread of the answers' own, never queued behind binds
        # waiting on the API server.
        answered = _decide(verb, quick, args)
        if answered is not None:
            return answered
        threads = answer_threads.get()
        with first.waiting_on_background():  # the worker thread marks its own answer
            return cast(
                tuple[Response, bool],
                await to_thread.run_sync(answer_alone, verb, handler, args, limiter=threads),
            )

    def reserved_early(verb: str, args: Any) -> contextlib.AbstractContextManager[None]:
        """A bind reserves its devices here on the event loop, before the next request is read
        (``SchedulingService.reserving_early``); its worker thread does the rest."""
        if verb != "bind":
            return contextlib.nullcontext()
        return service.reserving_early(args.pod_namespace, args.pod_name, args.pod_uid, args.node)

    def answer_alone(verb: str, handler: Callable[[Any], Answer], args: Any) -> tuple[Response, bool] | None:
        with first.answering():
            return _decide(verb, handler, args)

    @app.post(
        "/scheduler/filter",
        summary="Filter nodes for a pod",
        openapi_extra=_request_body(ExtenderArgs),
        responses={200: {"model": ExtenderFilterResult, "description": "Decision"}, **_errors()},
    )
    async def filter_route(request: Request) -> Response:
        return await run("filter", filter_, request)

    @app.post(
        "/scheduler/prioritize",
        summary="Score nodes 0..10 for a pod",
        openapi_extra=_request_body(ExtenderArgs),
        responses={200: {"model": list[HostPriority], "description": "Bare array"}, **_errors()},
    )
    async def prioritize_route(request: Request) -> Response:
        return await run("prioritize", prioritize, request)

    @app.post(
        "/scheduler/bind",
        summary="Allocate the pod's claims on a node and bind the pod",
        openapi_extra=_request_body(ExtenderBindingArgs),
        responses={200: {"model": ExtenderBindingResult, "description": "Error '' on success"}, **_errors()},
    )
    async def bind_route(request: Request) -> Response:
        return await run("bind", bind, request)

    @app.post(
        "/scheduler/preempt",
        summary="Keep the preemption candidates where evicting pods frees enough devices",
        openapi_extra=_request_body(ExtenderPreemptionArgs),
        responses={200: {"model": ExtenderPreemptionResult, "description": "Nodes kept"}, **_errors()},
    )
    async def preempt_route(request: Request) -> Response:
        return await run("preempt", preempt_, request)

    health = orjson.dumps({"status": "ok"})

    syncing = orjson.dumps({"status": "syncing"})

    # Probes are coroutines so they run on the event loop: sync routes share the thread pool with filters
    # waiting for the service lock, and a probe stuck behind them would get a healthy extender restarted.
    async def liveness() -> Response:
        return _json(health)

    async def readiness() -> Response:
        return _json(health) if ready is None or ready() else _json(syncing, 503)

    # Liveness: the process answers. Readiness: the state is complete (offline: loaded before the app exists;
    # cluster mode: every informer has listed once and the state is frozen: freeze_long_lived).
    # Scraping computes the inventory gauges under the service lock: a worker thread, not the event loop.
    def exposition() -> Response:
        return Response(content=metrics.render(), media_type=METRICS_TYPE)

    app.add_api_route("/metrics", exposition, methods=["GET"], summary="Prometheus metrics (text format)")
    probes = {"/healthz": liveness, "/livez": liveness, "/readyz": readiness}
    for path, probe in probes.items():
        app.add_api_route(
            path,
            probe,
            methods=["GET"],
            summary="Probe",
            responses={200: {"model": Health}, 503: {"model": Health, "description": "Not ready"}},
            name=path.strip("/"),
        )
    # Read-only explanations under /api/v1 (app.explain.pod).
    app.include_router(explain_router(service, limit, budget))
    verbs = {
        "filter": filter_route,
        "prioritize": prioritize_route,
        "bind": bind_route,
        "preempt": preempt_route,
    }
    app.add_middleware(
        VerbRoutes,
        routes={f"/scheduler/{verb}": route for verb, route in verbs.items()},
        answering=first.answering,
        answered_first=frozenset(f"/scheduler/{verb}" for verb in quick_handlers),
    )
    if auth is not None:  # added last: outermost, so it checks the verbs VerbRoutes answers too
        app.add_middleware(DelegatedAuthMiddleware, auth=auth)
    return app


class VerbRoutes:
    """ASGI middleware answering ``POST`` of the scheduler verbs itself, in front of FastAPI's router.

    kube-scheduler calls filter, prioritize and bind once per pod each, on the critical path of its
    scheduling cycle; FastAPI's routing, dependency solving and exception handling around a route cost
    about 0.2 ms of CPU a call (half of a warm filter's at 500 nodes). The route functions are the same, so
    the answers are; the routes stay declared for the OpenAPI document and answer every other method
    (405). ``answered_first``: the paths whose whole request is marked with ``answering``."""

    def __init__(
        self,
        app: Any,
        routes: dict[str, Callable[[Request], Awaitable[Response]]],
        answering: Callable[[], contextlib.AbstractContextManager[None]],
        answered_first: frozenset[str],
    ) -> None:
        self.app = app
        self.routes = routes
        self.answering = answering
        self.answered_first = answered_first

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = _route_path(scope)
        route = self.routes.get(path) if scope["type"] == "http" else None
        if route is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        # kube-scheduler waits on filter and prioritize from its request's first byte to the answer's
        # last: background work steps aside for reading and writing them too (AnswerFirst).
        with self.answering() if path in self.answered_first else contextlib.nullcontext():
            response = await route(Request(scope, receive))
            await response(scope, receive, send)  # then the answer's follow-up (Answer.then)


def _route_path(scope: dict[str, Any]) -> str:
    """The path the router matches: behind a proxy that serves the extender under a prefix (ASGI
    ``root_path``), without that prefix, so every verb request is answered here and none by the router."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path


def _pod_ref(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
