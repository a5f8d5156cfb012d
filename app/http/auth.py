"""Delegated authentication and authorization of HTTP callers (``serve --delegated-auth``), the way
Kubernetes components do it (k8s.io/apiserver's delegating authenticator and authorizer).

The extender listens on the pod's loopback by default and needs none of this. Listening beyond it, the
explanation routes would show every namespace's claims (opaque driver parameters, ``status.devices``
network data) and the scheduler routes would let anyone bind pods. With ``--delegated-auth``:

* the caller is its bearer token (``Authorization: Bearer ...``), checked with a TokenReview, or else the
  client certificate TLS verified against ``--ssl-ca-certs`` (user: the subject's CN, groups: its Os);
* ``/scheduler/*`` answers only the scheduler's identity (``--scheduler-user``, default
  ``system:kube-scheduler``);
* ``/api/*`` asks a SubjectAccessReview for the non-resource URL (path and verb ``get`` / ``post``), as
  core components do for ``/metrics``;
* probes (``/healthz``, ``/livez``, ``/readyz``) and the OpenAPI document stay open.

No identity: 401; refused: 403; a review that could not be made (API server unreachable): 503. Nothing
fails open. Review answers are kept ``CACHE_SECONDS`` (a scheduling cycle makes three calls), at most
``CACHE_ENTRIES`` of each kind, oldest first out; tokens are kept as digests only.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.http.refusal import Refusal

__all__ = ["CACHE_ENTRIES", "CACHE_SECONDS", "DelegatedAuth", "DelegatedAuthMiddleware", "User"]

log = logging.getLogger(__name__)

CACHE_SECONDS = 10.0
CACHE_ENTRIES = 4096

Review = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]]
"""``review(plural, body)``: POST a TokenReview (``tokenreviews``) or SubjectAccessReview
(``subjectaccessreviews``) and return the answer. Raises on failure."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


class _Refused(Refusal):
    """The caller is not identified (401), not allowed (403), or could not be checked (503)."""


class _Cache:
    """At most CACHE_ENTRIES answers, each for CACHE_SECONDS."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> Any:
        found = self._entries.get(key)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def put(self, key: Any, value: Any) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (time.monotonic() + CACHE_SECONDS, value)
        while len(self._entries) > CACHE_ENTRIES:
            self._entries.popitem(last=False)


def _cert_user(cert: Mapping[str, Any] | None) -> User | None:
    """The user of a verified client certificate (``ssl.SSLSocket.getpeercert()`` form)."""
    if not cert:
        return None
    names = [(k, v) for rdn in cert.get("subject") or () for k, v in rdn]
    common = [v for k, v in names if k == "commonName"]
    if not common:
        return None
    return User(common[0], tuple(v for k, v in names if k == "organizationName"))


class DelegatedAuth:
    """Decides who may call which route (module docstring)."""

    def __init__(self, review: Review, scheduler_user: str) -> None:
        self.review = review
        self.scheduler_user = scheduler_user
        self._tokens = _Cache()
        self._access = _Cache()

    async def check(self, path: str, method: str, headers: Mapping[str, str], cert: Any) -> None:
        """Returns when the caller may call ``method path``. Raises _Refused (401, 403, 503)."""
        user = await self._user(headers.get("authorization", ""), cert)
        if path.startswith("/scheduler/"):
            if user.name != self.scheduler_user:
                raise _Refused(403, f"user {user.name!r} may not call the scheduler routes")
            return
        verb = "get" if method in ("GET", "HEAD") else method.lower()
        if not await self._allowed(user, path, verb):
            raise _Refused(403, f'user {user.name!r} may not {verb} "{path}"')

    async def _user(self, authorization: str, cert: Any) -> User:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token:
            return await self._token_user(token.strip())
        user = _cert_user(cert)
        if user is None:
            raise _Refused(401, "authentication required: a bearer token or a client certificate")
        return user

    async def _token_user(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is None:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
            status = (await self._ask("tokenreviews", body)).get("status") or {}
            info = status.get("user") or {}
            cached = (
                User(str(info.get("username") or ""), tuple(map(str, info.get("groups") or ())))
                if status.get("authenticated") and info.get("username")
                else False
            )
            self._tokens.put(key, cached)
        if cached is False:
            raise _Refused(401, "the bearer token was not accepted")
        return cached

    async def _allowed(self, user: User, path: str, verb: str) -> bool:
        key = (user, path, verb)
        cached = self._access.get(key)
        if cached is None:
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.name,
                    "groups": list(user.groups),
                    "nonResourceAttributes": {"path": path, "verb": verb},
                },
            }
            cached = bool(
                ((await self._ask("subjectaccessreviews", body)).get("status") or {}).get("allowed")
            )
            self._access.put(key, cached)
        return bool(cached)

    async def _ask(self, plural: str, body: dict[str, Any]) -> Mapping[str, Any]:
        try:
            return await self.review(plural, body)
        except Exception as e:
            log.warning("%s failed: %s", plural, e)
            raise _Refused(503, f"cannot check the caller with the API server: {type(e).__name__}") from e


class DelegatedAuthMiddleware:
    """ASGI middleware applying ``DelegatedAuth`` to ``/scheduler/*`` and ``/api/*``. The client
    certificate comes from the scope's ``extensions.tls.client_cert`` (``app.http.server`` puts it
    there)."""

    def __init__(self, app: Any, auth: DelegatedAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope.get("type") != "http" or not path.startswith(("/scheduler/", "/api/")):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        cert = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert")
        try:
            await self.auth.check(path, scope.get("method", "GET"), headers, cert)
        except _Refused as e:
            body = orjson.dumps({"Error": e.message})
            extra = [(b"www-authenticate", b'Bearer realm="dra-extender"')] if e.status == 401 else []
            await send(
                {
                    "type": "http.response.start",
                    "status": e.status,
                    "headers": [(b"content-type", b"application/json"), *extra],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
