"""``FakeKubeAPI``: a fake kube-apiserver for the tests, serving real HTTP on 127.0.0.1 (aiohttp), so the
real kubernetes-asyncio client code path runs end to end.

What it serves (only what the extender uses, with the API server's rules that matter to it):

* discovery: ``/apis/resource.k8s.io`` (APIGroup) and ``/apis/resource.k8s.io/{version}`` (APIResourceList);
  which kinds are served at which version is configurable (``dra_versions``);
* list with ``limit``/``continue`` and a list resourceVersion; items without ``kind``/``apiVersion``;
* watch from a resourceVersion: replay of later events then live ones (ADDED, MODIFIED, DELETED), BOOKMARK
  on demand, ``timeoutSeconds``, an ERROR event with code 410 when the resourceVersion was compacted;
* GET / PUT / POST / DELETE of objects; ``PUT .../status`` (status only; ``allocation`` immutable once set;
  ``reservedFor`` needs an allocation); the main resource ignores status changes; ``metadata.resourceVersion``
  and ``metadata.uid`` in a body are preconditions (409); finalizers delay deletion;
* ``POST pods/{name}/binding`` with the UID precondition, "already assigned to node" and spec.nodeName;
* ``POST pods/{name}/eviction`` with the UID precondition and PodDisruptionBudgets (``matchLabels`` only):
  429 with a ``DisruptionBudget`` cause while one allows no disruption, else the pod is deleted;
* strategic-merge ``PATCH pods/{name}/status`` (top-level status keys) and ``PATCH pods/{name}`` (labels
  and annotations; another ``metadata.uid`` is refused as an immutable-field change, 422);
* events.k8s.io/v1 Events: create with the API server's validation of a new Event (``_event_problem``),
  strategic-merge ``PATCH`` of an Event (``series``);
* TokenReview and SubjectAccessReview (non-resource URLs) from ``tokens`` and ``allowed``.

Faults: ``fail`` (answer an error status N times; ``after=True``: once the request is carried out),
``disconnect`` (close the connection without an answer; ``after=True``: once it is carried out), ``gate``
(hold matching requests until an event is set), ``down`` (every request disconnected),
``silent_watches`` (watches stay open and send nothing), ``drop_watches``, ``replay`` (send a stale or
duplicate event), ``compact`` (older resourceVersions are gone), ``bookmark``. ``requests`` records every
request (method, path, query, body).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

Obj = dict[str, Any]
ResKey = tuple[str, str]  # (group, plural)

DRA = "resource.k8s.io"

# kind -> (group, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("", "namespaces", False),
    "Node": ("", "nodes", False),
    "Pod": ("", "pods", True),
    "ResourceSlice": (DRA, "resourceslices", False),
    "DeviceClass": (DRA, "deviceclasses", False),
    "ResourceClaim": (DRA, "resourceclaims", True),
    "ResourceClaimTemplate": (DRA, "resourceclaimtemplates", True),
    "DeviceTaintRule": (DRA, "devicetaintrules", False),
    "Lease": ("coordination.k8s.io", "leases", True),
    "Event": ("events.k8s.io", "events", True),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets", True),
}
_BY_PLURAL = {(g, p): k for k, (g, p, _) in KINDS.items()}
_DEFAULT_DRA = {
    "v1": ["resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"],
    "v1beta2": [
        "resourceslices",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "devicetaintrules",
    ],
}

DISRUPTION_BUDGET = "DisruptionBudget"
"""The ``details.causes`` type of the Eviction API's refusals for a PodDisruptionBudget (policy/v1
``DisruptionBudgetCause``)."""

_BODY = web.RequestKey("body", object)
_CLOSE = object()
_GONE = object()


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    times: int
    status: int = 0
    message: str = ""
    reason: str = ""
    disconnect: bool = False
    gate: asyncio.Event | None = None
    after: bool = False
    """Carry the request out, then answer the error status (a proxy's gateway timeout after the write), or
    with a gate, hold the answer."""
    retry_after: str = ""
    """The error's ``Retry-After`` header, when not empty."""
    causes: tuple[str, ...] = ()
    """The error's ``details.causes`` types (the Eviction API's ``DisruptionBudget``)."""
    late: bool = False
    """With a gate: carry the request out once the gate opens, even if its client has gone (the fake API
    server only)."""


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class _Watch:
    res: ResKey
    namespace: str | None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


class FaultPlan:
    """Faults to inject into requests, by method and path pattern, each for a number of requests: ``fail``
    (answer an error status), ``disconnect`` (close the connection without an answer), ``gate`` (hold
    the request until an event is set). The fake API server has them, and so has the chaos run's proxy in
    front of a real one (``loadtests.faultproxy``)."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []

    def fail(
        self,
        method: str,
        pattern: str,
        status: int,
        times: int = 1,
        message: str = "",
        reason: str = "",
        *,
        after: bool = False,
        retry_after: str = "",
        causes: tuple[str, ...] = (),
    ) -> None:
        """``after``: the request is carried out first (``Fault.after``); ``retry_after``: the answer's
        ``Retry-After``; ``causes``: its ``details.causes`` types."""
        message = message or "injected"
        fault = Fault(
            method,
            re.compile(pattern),
            times,
            status,
            message,
            reason,
            after=after,
            retry_after=retry_after,
            causes=causes,
        )
        self.faults.append(fault)

    def disconnect(self, method: str, pattern: str, times: int = 1, *, after: bool = False) -> None:
        """``after``: the request is carried out first, then its connection closed (a server that stored a
        write and went away, or a proxy that lost the answer)."""
        self.faults.append(Fault(method, re.compile(pattern), times, disconnect=True, after=after))

    def gate(
        self, method: str, pattern: str, times: int = 1, *, after: bool = False, late: bool = False
    ) -> asyncio.Event:
        """Hold matching requests until the event is set; ``after``: carry each out first and hold its
        answer (a write stored while the client gives up waiting); ``late``: carry each out once the event
        is set even if its client has gone by then (a server finishing a request whose connection
        closed)."""
        event = asyncio.Event()
        self.faults.append(Fault(method, re.compile(pattern), times, gate=event, after=after, late=late))
        return event

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The first fault left for this request, counted as used; None when there is none."""
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                fault.times -= 1
                return fault
        return None


def write_kubeconfig(directory: Path, server: str, proxy_url: str | None = None) -> Path:
    """``directory/kubeconfig``: one context for ``server`` with a bearer token (and ``proxy-url``)."""
    path = directory / "kubeconfig"
    proxy = f"    proxy-url: {proxy_url}\n" if proxy_url else ""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {server}\n{proxy}"
        "users:\n- name: fake\n  user:\n    token: fake-token\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
    )
    return path


def status_body(code: int, reason: str, message: str, causes: tuple[str, ...] = ()) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 300 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if causes:
        # metav1.StatusCause serialises its Type as "reason".
        body["details"] = {"causes": [{"reason": cause, "message": message} for cause in causes]}
    return body


def fault_answer(fault: Fault, reason: str) -> web.Response:
    """The error answer of a ``fail`` fault, under ``reason``, with its ``Retry-After`` when it has one."""
    headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
    return web.json_response(
        status_body(fault.status, reason, fault.message, fault.causes), status=fault.status, headers=headers
    )


def drop(request: web.Request) -> web.StreamResponse:
    """Close the request's connection without an answer (the response returned is never sent)."""
    assert request.transport is not None
    request.transport.close()
    return web.Response(status=500)


class FakeKubeAPI(FaultPlan):
    def __init__(self, dra_versions: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.dra_versions = dra_versions or _DEFAULT_DRA
        self.rv = 100
        self.store: dict[ResKey, dict[tuple[str, str], Obj]] = {}
        self.log: dict[ResKey, list[tuple[int, str, Obj]]] = {}
        self.compacted: dict[ResKey, int] = {}
        self.requests: list[Recorded] = []
        self.watches: list[_Watch] = []
        self.down = False
        self.silent_watches = False
        self._uids = itertools.count(1)
        self.tokens: dict[str, tuple[str, list[str]]] = {}
        """TokenReview: token -> (username, groups); any other token is not authenticated."""
        self.allowed: set[tuple[str, str, str]] = set()
        """SubjectAccessReview: (user, non-resource path, verb) allowed; anything else is denied."""
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.late_requests: set[asyncio.Future[web.StreamResponse]] = set()
        """Requests of ``late`` gates still to carry out (kept referenced until they are)."""

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> FakeKubeAPI:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, directory: Path) -> Path:
        return write_kubeconfig(directory, self.url)

    # --- objects --------------------------------------------------------------------------------------------

    def _res(self, kind: str) -> ResKey:
        group, plural, _ = KINDS[kind]
        return group, plural

    def _version_of(self, res: ResKey) -> str:
        group, plural = res
        if group == DRA:
            for version, plurals in self.dra_versions.items():
                if plural in plurals:
                    return f"{DRA}/{version}"
            return f"{DRA}/v1"
        return f"{group}/v1" if group else "v1"

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, res: ResKey, kind: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self.log.setdefault(res, []).append((rv, kind, snapshot))
        for watch in self.watches:
            if watch.res == res and watch.namespace in (None, obj["metadata"].get("namespace")):
                watch.queue.put_nowait({"type": kind, "object": snapshot})

    def add(self, kind: str, obj: Obj) -> Obj:
        """Create ``obj`` as the API server would (uid, resourceVersion, creationTimestamp) + ADDED event."""
        res = self._res(kind)
        stored = copy.deepcopy(obj)
        stored["apiVersion"] = self._version_of(res)
        stored["kind"] = kind
        meta = stored.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uids):05d}"
        meta.setdefault("uid", f"uid-{kind.lower()}-{meta.get('namespace', '')}-{meta['name']}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta["resourceVersion"] = self._next_rv()
        if not KINDS[kind][2]:
            meta.pop("namespace", None)
        key = (meta.get("namespace", ""), meta["name"])
        self.store.setdefault(res, {})[key] = stored
        self._emit(res, "ADDED", stored)
        return copy.deepcopy(stored)

    def put(self, kind: str, obj: Obj) -> Obj:
        """Replace ``obj`` out of band (no preconditions) + MODIFIED event."""
        res = self._res(kind)
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = self._next_rv()
        self.store[res][key] = stored
        self._emit(res, "MODIFIED", stored)
        return copy.deepcopy(stored)

    def remove(self, kind: str, namespace: str, name: str) -> None:
        res = self._res(kind)
        stored = self.store[res].pop((namespace, name))
        stored["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(res, "DELETED", stored)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        found = self.store.get(self._res(kind), {}).get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    # --- faults ---------------------------------------------------------------------------------------------

    def replay(self, kind: str, event_type: str, obj: Obj) -> None:
        """Send ``obj`` as-is to the open watches of ``kind`` (a stale or duplicate event, as a watch cache
        or a proxy may deliver); the store and the event log are unchanged."""
        res = self._res(kind)
        for watch in self.watches:
            if watch.res == res:
                watch.queue.put_nowait({"type": event_type, "object": copy.deepcopy(obj)})

    def drop_watches(self) -> None:
        for watch in self.watches:
            watch.queue.put_nowait(_CLOSE)

    def compact(self, kind: str) -> None:
        """Events up to now are gone: a watch from an older resourceVersion gets 410; open ones too."""
        res = self._res(kind)
        self.compacted[res] = self.rv + 1
        self.log[res] = []
        for watch in self.watches:
            if watch.res == res:
                watch.queue.put_nowait(_GONE)

    def bookmark(self, kind: str) -> None:
        res = self._res(kind)
        for watch in self.watches:
            if watch.res == res:
                watch.queue.put_nowait(
                    {
                        "type": "BOOKMARK",
                        "object": {"kind": KINDS[kind][1], "metadata": {"resourceVersion": str(self.rv)}},
                    }
                )

    def open_watches(self, kind: str) -> int:
        return sum(1 for w in self.watches if w.res == self._res(kind))

    def count(self, method: str, pattern: str, query: str | None = None) -> int:
        regex = re.compile(pattern)
        return sum(
            1
            for r in self.requests
            if r.method == method and regex.search(r.path) and (query is None or query in r.query)
        )

    def writes(self) -> list[Recorded]:
        """Every write but the Events': those are written apart, whenever the recorder gets to them
        (``app.kube.events``), so a test of what an action writes does not see them interleaved."""
        return [r for r in self.requests if r.method != "GET" and "/apis/events.k8s.io/" not in r.path]

    # --- HTTP -----------------------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = None
        if request.can_read_body:
            raw = await request.read()
            body = orjson.loads(raw) if raw else None
        request[_BODY] = body
        self.requests.append(Recorded(request.method, request.path, dict(request.query), body))
        if self.down:
            return drop(request)
        fault = self.take_fault(request.method, request.path)
        if fault is not None and fault.gate is not None and fault.after:
            answer = await handler(request)
            await fault.gate.wait()
            return answer
        if fault is not None and fault.gate is not None and fault.late:
            # Shielded: the handler is cancelled when the client goes, the request is still carried out.
            carried = asyncio.ensure_future(self._after(fault.gate, handler, request))
            self.late_requests.add(carried)
            carried.add_done_callback(self.late_requests.discard)
            return await asyncio.shield(carried)
        if fault is not None and fault.gate is not None:
            await fault.gate.wait()
        elif fault is not None and fault.disconnect:
            if fault.after:
                await handler(request)
            return drop(request)
        elif fault is not None:
            if fault.after:
                await handler(request)
            return fault_answer(fault, fault.reason or "Injected")
        return await handler(request)

    @staticmethod
    async def _after(gate: asyncio.Event, handler: Any, request: web.Request) -> web.StreamResponse:
        await gate.wait()
        answer: web.StreamResponse = await handler(request)
        return answer

    @staticmethod
    def _error(code: int, reason: str, message: str) -> web.Response:
        return web.json_response(status_body(code, reason, message), status=code)

    @staticmethod
    def _json(obj: Any, status: int = 200) -> web.Response:
        return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts[:1] == ["api"]:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"]:
            if len(parts) == 2:
                return self._api_group(parts[1])
            if len(parts) == 3:
                return self._api_resources(parts[1], parts[2])
            group, rest = parts[1], parts[3:]
        else:
            return self._error(404, "NotFound", request.path)
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        res = (group, plural)
        if request.method == "POST" and plural in ("tokenreviews", "subjectaccessreviews"):
            return self._review(plural, request[_BODY] or {})
        if res not in _BY_PLURAL:
            return self._error(404, "NotFound", f"the server could not find the requested resource {plural}")
        kind = _BY_PLURAL[res]
        if group == DRA and not any(plural in p for p in self.dra_versions.values()):
            return self._error(404, "NotFound", f"{plural} is not served")
        method = request.method
        if name is None:
            if method == "GET":
                if request.query.get("watch") in ("true", "1", "True"):
                    return await self._watch(request, res, namespace)
                return self._list(request, res, namespace)
            if method == "POST":
                return self._create(request, kind, namespace)
        elif sub is None:
            if method == "GET":
                return self._get(res, namespace, name)
            if method == "PUT":
                return self._update(request, kind, namespace, name, status=False)
            if method == "DELETE":
                return self._delete(request, kind, namespace, name)
            if method == "PATCH" and kind == "Event":
                return self._patch_event(request, namespace, name)
            if method == "PATCH" and kind == "Pod":
                return self._patch_metadata(request, kind, namespace, name)
        elif sub == "status" and method == "PUT":
            return self._update(request, kind, namespace, name, status=True)
        elif sub == "status" and method == "PATCH":
            return self._patch_status(request, kind, namespace, name)
        elif sub == "binding" and method == "POST":
            return self._binding(request, namespace, name)
        elif sub == "eviction" and method == "POST" and kind == "Pod":
            return self._evict(request, namespace or "", name)
        return self._error(405, "MethodNotAllowed", f"{method} {request.path}")

    def _review(self, plural: str, body: Obj) -> web.Response:
        spec = body.get("spec") or {}
        if plural == "tokenreviews":
            found = self.tokens.get(str(spec.get("token")))
            user = {"username": found[0], "groups": found[1]} if found else {}
            return self._json({**body, "status": {"authenticated": found is not None, "user": user}}, 201)
        attributes = spec.get("nonResourceAttributes") or {}
        allowed = (spec.get("user"), attributes.get("path"), attributes.get("verb")) in self.allowed
        return self._json({**body, "status": {"allowed": allowed}}, 201)

    def _api_group(self, group: str) -> web.Response:
        if group != DRA:
            return self._error(404, "NotFound", group)
        versions = [{"groupVersion": f"{DRA}/{v}", "version": v} for v in self.dra_versions]
        return self._json(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": DRA,
                "versions": versions,
                "preferredVersion": versions[0],
            }
        )

    def _api_resources(self, group: str, version: str) -> web.Response:
        if group != DRA or version not in self.dra_versions:
            return self._error(404, "NotFound", f"{group}/{version}")
        resources = []
        for plural in self.dra_versions[version]:
            kind = _BY_PLURAL[(DRA, plural)]
            namespaced = KINDS[kind][2]
            resources.append(
                {"name": plural, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list"]}
            )
            resources.append(
                {"name": f"{plural}/status", "kind": kind, "namespaced": namespaced, "verbs": ["get"]}
            )
        return self._json(
            {"kind": "APIResourceList", "groupVersion": f"{DRA}/{version}", "resources": resources}
        )

    def _items(self, res: ResKey, namespace: str | None) -> list[Obj]:
        objects = self.store.get(res, {})
        return [objects[k] for k in sorted(objects) if namespace is None or k[0] == namespace]

    def _list(self, request: web.Request, res: ResKey, namespace: str | None) -> web.Response:
        items = self._items(res, namespace)
        limit = int(request.query.get("limit") or 0) or len(items) or 1
        token = request.query.get("continue")
        list_rv, offset = (int(x) for x in token.split(":")) if token else (self.rv, 0)
        if token and list_rv < self.compacted.get(res, 0):
            return self._error(410, "Expired", "The provided continue parameter is too old")
        page = items[offset : offset + limit]
        clean = []
        for item in page:
            item = copy.deepcopy(item)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            clean.append(item)
        meta: Obj = {"resourceVersion": str(list_rv)}
        if offset + limit < len(items):
            meta["continue"] = f"{list_rv}:{offset + limit}"
        kind = _BY_PLURAL[res]
        return self._json(
            {"kind": f"{kind}List", "apiVersion": self._version_of(res), "metadata": meta, "items": clean}
        )

    async def _watch(self, request: web.Request, res: ResKey, namespace: str | None) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        await response.prepare(request)
        if since and since < self.compacted.get(res, 0):
            gone = {
                "type": "ERROR",
                "object": status_body(410, "Expired", f"too old resource version: {since}"),
            }
            await response.write(orjson.dumps(gone) + b"\n")
            return response
        watch = _Watch(res, namespace)
        for rv, kind, obj in self.log.get(res, []):
            if rv > since and namespace in (None, obj["metadata"].get("namespace")):
                watch.queue.put_nowait({"type": kind, "object": obj})
        self.watches.append(watch)
        silent = self.silent_watches
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                try:
                    item = await asyncio.wait_for(watch.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                if item is _CLOSE:
                    if request.transport is not None:
                        request.transport.close()
                    break
                if silent:
                    continue
                if item is _GONE:
                    gone = {
                        "type": "ERROR",
                        "object": status_body(410, "Expired", "too old resource version"),
                    }
                    await response.write(orjson.dumps(gone) + b"\n")
                    break
                await response.write(orjson.dumps(item) + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watches.remove(watch)
        return response

    def _get(self, res: ResKey, namespace: str | None, name: str) -> web.Response:
        obj = self.store.get(res, {}).get((namespace or "", name))
        if obj is None:
            return self._error(404, "NotFound", f'{res[1]} "{name}" not found')
        return self._json(obj)

    def _preconditions(self, stored: Obj, body: Obj, plural: str, name: str) -> web.Response | None:
        meta = body.get("metadata") or {}
        if meta.get("uid") and meta["uid"] != stored["metadata"]["uid"]:
            return self._error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{name}": Precondition failed: '
                f"UID in precondition: {meta['uid']}, UID in object meta: {stored['metadata']['uid']}",
            )
        if meta.get("resourceVersion") and meta["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            return self._error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        return None

    def _update(
        self, request: web.Request, kind: str, namespace: str | None, name: str, *, status: bool
    ) -> web.Response:
        res = self._res(kind)
        key = (namespace or "", name)
        stored = self.store.get(res, {}).get(key)
        if stored is None:
            return self._error(404, "NotFound", f'{res[1]} "{name}" not found')
        body = request[_BODY] or {}
        problem = self._preconditions(stored, body, res[1], name)
        if problem is not None:
            return problem
        new = copy.deepcopy(stored)
        if status:
            new_status = {k: v for k, v in (body.get("status") or {}).items() if v is not None}
            old_alloc = (stored.get("status") or {}).get("allocation")
            new_alloc = new_status.get("allocation")
            if old_alloc and new_alloc and new_alloc != old_alloc:
                return self._error(422, "Invalid", "status.allocation: Invalid value: field is immutable")
            if new_status.get("reservedFor") and not new_alloc:
                return self._error(
                    422,
                    "Invalid",
                    "status.reservedFor: Forbidden: may not be specified when `allocated` is not set",
                )
            if (
                new_status.get("reservedFor")
                and stored["metadata"].get("deletionTimestamp")
                and len(new_status["reservedFor"])
                > len((stored.get("status") or {}).get("reservedFor") or ())
            ):
                return self._error(
                    422, "Invalid", "status.reservedFor: Forbidden: new entries while deleting"
                )
            new["status"] = new_status
        else:
            meta = body.get("metadata") or {}
            for field_name in ("labels", "annotations", "finalizers", "ownerReferences"):
                if meta.get(field_name):
                    new["metadata"][field_name] = meta[field_name]
                else:
                    new["metadata"].pop(field_name, None)
        new["metadata"]["resourceVersion"] = self._next_rv()
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.store[res][key]
            self._emit(res, "DELETED", new)
            return self._json(new)
        self.store[res][key] = new
        self._emit(res, "MODIFIED", new)
        return self._json(new)

    def _create(self, request: web.Request, kind: str, namespace: str | None) -> web.Response:
        body = copy.deepcopy(request[_BODY] or {})
        problem = _event_problem(body, namespace) if kind == "Event" else None
        if problem is not None:
            return self._error(422, "Invalid", f"Event.events.k8s.io is invalid: {problem}")
        meta = body.setdefault("metadata", {})
        meta["namespace"] = namespace
        name = meta.get("name")
        if name and (namespace or "", name) in self.store.get(self._res(kind), {}):
            return self._error(409, "AlreadyExists", f'{KINDS[kind][1]} "{name}" already exists')
        meta.pop("uid", None)
        meta.pop("resourceVersion", None)
        meta["uid"] = f"uid-created-{next(self._uids)}"
        return self._json(self.add(kind, body), status=201)

    def _delete(self, request: web.Request, kind: str, namespace: str | None, name: str) -> web.Response:
        res = self._res(kind)
        key = (namespace or "", name)
        stored = self.store.get(res, {}).get(key)
        if stored is None:
            return self._error(404, "NotFound", f'{res[1]} "{name}" not found')
        pre = ((request[_BODY] or {}).get("preconditions") or {}).get("uid")
        if pre and pre != stored["metadata"]["uid"]:
            return self._error(409, "Conflict", "Precondition failed: UID in precondition")
        if stored["metadata"].get("finalizers"):
            new = copy.deepcopy(stored)
            new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
            new["metadata"]["resourceVersion"] = self._next_rv()
            self.store[res][key] = new
            self._emit(res, "MODIFIED", new)
            return self._json(new)
        self.remove(kind, namespace or "", name)
        return self._json(status_body(200, "", "deleted"))

    def _evict(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """The Eviction API: 429 while a PodDisruptionBudget selecting the pod (``matchLabels``) allows no
        disruption, else that budget's ``disruptionsAllowed`` goes down by one and the pod is deleted."""
        stored = self.get("Pod", namespace, name)
        if stored is None:
            return self._error(404, "NotFound", f'pods "{name}" not found')
        body = request[_BODY] or {}
        pre = (((body.get("deleteOptions") or {}).get("preconditions")) or {}).get("uid")
        if pre and pre != stored["metadata"]["uid"]:
            return self._error(409, "Conflict", "Precondition failed: UID in precondition")
        labels = stored["metadata"].get("labels") or {}
        budgets = [
            b
            for b in self.store.get(self._res("PodDisruptionBudget"), {}).values()
            if b["metadata"].get("namespace") == namespace
            and (selector := (b.get("spec") or {}).get("selector", {}).get("matchLabels"))
            and all(labels.get(k) == v for k, v in selector.items())
        ]
        if any((b.get("status") or {}).get("disruptionsAllowed", 0) < 1 for b in budgets):
            refusal = status_body(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the budget",
                (DISRUPTION_BUDGET,),
            )
            return web.json_response(refusal, status=429)
        for budget in budgets:
            new = copy.deepcopy(budget)
            new["status"]["disruptionsAllowed"] -= 1
            self.put("PodDisruptionBudget", new)
        self.remove("Pod", namespace, name)
        return self._json(status_body(201, "", "evicted"), 201)

    def _patch_status(
        self, request: web.Request, kind: str, namespace: str | None, name: str
    ) -> web.Response:
        res = self._res(kind)
        key = (namespace or "", name)
        stored = self.store.get(res, {}).get(key)
        if stored is None:
            return self._error(404, "NotFound", f'{res[1]} "{name}" not found')
        new = copy.deepcopy(stored)
        status = new.setdefault("status", {})
        for k, v in ((request[_BODY] or {}).get("status") or {}).items():
            if v is None:
                status.pop(k, None)
            else:
                status[k] = v
        return self._json(self.put(kind, new))

    def _patch_event(self, request: web.Request, namespace: str | None, name: str) -> web.Response:
        stored = self.get("Event", namespace or "", name)
        if stored is None:
            return self._error(404, "NotFound", f'events.events.k8s.io "{name}" not found')
        patch = request[_BODY] or {}
        if set(patch) - {"series"}:
            return self._error(422, "Invalid", f"only series may change: {sorted(patch)}")
        series = patch.get("series")
        if (
            not isinstance(series, dict)
            or int(series.get("count") or 0) < 2
            or not series.get("lastObservedTime")
        ):
            return self._error(422, "Invalid", "series.count: should be at least 2; series.lastObservedTime")
        stored["series"] = series
        return self._json(self.put("Event", stored))

    def _patch_metadata(
        self, request: web.Request, kind: str, namespace: str | None, name: str
    ) -> web.Response:
        stored = self.store.get(self._res(kind), {}).get((namespace or "", name))
        if stored is None:
            return self._error(404, "NotFound", f'pods "{name}" not found')
        patch = (request[_BODY] or {}).get("metadata") or {}
        uid = patch.get("uid")
        if uid and uid != stored["metadata"].get("uid"):
            return self._error(
                422,
                "Invalid",
                f'Pod "{name}" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable',
            )
        new = copy.deepcopy(stored)
        for field_name in ("labels", "annotations"):
            merged = new["metadata"].setdefault(field_name, {})
            for k, v in (patch.get(field_name) or {}).items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
        return self._json(self.put(kind, new))

    def _binding(self, request: web.Request, namespace: str | None, name: str) -> web.Response:
        body = request[_BODY] or {}
        pod = self.store.get(("", "pods"), {}).get((namespace or "", name))
        if pod is None:
            return self._error(404, "NotFound", f'pods "{name}" not found')
        if (body.get("metadata") or {}).get("name") != name:
            return self._error(400, "BadRequest", "name in URL does not match name in Binding object")
        uid = (body.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            return self._error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": Precondition failed: '
                f"UID in precondition: {uid}, UID in object meta: {pod['metadata']['uid']}",
            )
        if pod["metadata"].get("deletionTimestamp"):
            return self._error(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            return self._error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": '
                f'pod {name} is already assigned to node "{bound}"',
            )
        new = copy.deepcopy(pod)
        new.setdefault("spec", {})["nodeName"] = (body.get("target") or {}).get("name")
        self.put("Pod", new)
        return self._json(status_body(201, "", ""), status=201)


def _event_problem(event: Obj, namespace: str | None) -> str | None:
    """What kube-apiserver refuses in a new events.k8s.io/v1 Event (``ValidateEventCreate``), or None."""
    regarding = event.get("regarding") or {}
    required = ("eventTime", "reportingController", "reportingInstance", "action", "reason")
    missing = [f for f in required if not event.get(f)]
    if missing:
        return f"{missing[0]}: Required value"
    if event.get("type") not in ("Normal", "Warning"):
        return f"type: Invalid value: {event.get('type')!r}"
    if regarding.get("namespace") and regarding["namespace"] != namespace:
        return "regarding.namespace: does not match the Event's namespace"
    limits = {"reportingInstance": 128, "action": 128, "reason": 128, "note": 1024}
    for field_name, limit in limits.items():
        if len(str(event.get(field_name) or "").encode()) > limit:
            return f"{field_name}: can have at most {limit} characters"
    name = str((event.get("metadata") or {}).get("name") or "")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name):
        return f"metadata.name: Invalid value: {name!r}: a DNS subdomain"
    series = event.get("series")
    if series is not None and (int(series.get("count") or 0) < 2 or not series.get("lastObservedTime")):
        return "series: count at least 2 and lastObservedTime"
    return None
