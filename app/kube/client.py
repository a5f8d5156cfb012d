"""The only module that talks to the Kubernetes API server.

kubernetes-asyncio supplies the connection (kubeconfig or in-cluster configuration, TLS, bearer-token refresh,
the aiohttp session). Requests go out on its aiohttp session with its auth headers
(``ApiClient.update_params_for_auth``: the token refreshed as the library refreshes it), but not through
``ApiClient.call_api``: that walks every body in Python and encodes it with the standard library's json,
a third of a claim write's CPU on the extender's API thread. Bodies are encoded and answers parsed with
orjson (the library's model deserialisation is ~36x slower, ecosystem-aesthetics.md §4.2). Objects in and
out are plain API-shaped dicts.

Timeouts (``ClusterSettings``): every request has a connect timeout; ordinary requests a total timeout;
watches a socket read timeout (a half-dead TCP connection otherwise hangs forever: kubernetes-asyncio
#360), raised as ``WatchIdle``. It is the informers' only deadline on a watch: aiohttp restarts one timer
per chunk the socket delivers, where a deadline around each event read cost ~4 % of the extender's CPU
under load. Rate: every request, watches included, first takes a token from ``rate_limit`` when one is
given (``app.kube.ratelimit``; ``ClusterSettings.api_qps`` / ``api_burst``), as client-go's rate limiter
does for kube-scheduler. Retry: a request turned away (429) that says ``Retry-After`` in whole seconds
is sent again after that wait, up to ``RETRY_AFTER_ATTEMPTS`` times, as client-go's requests are (a wait
over ``RETRY_AFTER_MAX_SECONDS``, other answers, and a 429 to aiohttp's second try, reach the caller at
once; so does every answer to a request sent with ``retry=False``).

kubernetes-asyncio's aiohttp session trusts the environment: before every request it reads ``~/.netrc`` and
the proxy variables in a worker thread, two thread handoffs per claim write or binding. The session here
does not; the proxy (``app.kube.proxy``: the environment as client-go reads it, unless the kubeconfig
names one) is looked up once when connecting. Credentials come from the kubeconfig, never from ``.netrc``.

Exceptions::

    KubeAPIError            a call failed; .status (HTTP code, 0 without an answer), .reason, .message;
    │                       .resent: the answer is to aiohttp's second try (``_send_once``)
    ├── ConflictError       409: resourceVersion or UID precondition failed, "already assigned to node"
    ├── GoneError           410: the resourceVersion is too old (watch, list continuation)
    ├── NotFoundError       404
    └── TransportError      no HTTP answer (connection refused or reset, timeout); ``.sent`` is False only
        │                   when the request certainly never reached the server (a connect failure
        │                   on its first try)
        └── WatchIdle       a watch received nothing, not even a bookmark, for its read timeout

``retry_after`` carries an answer's ``Retry-After`` in whole seconds (``_retry_after_seconds``), else None.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config.kube_config import ENV_KUBECONFIG_PATH_SEPARATOR

from app.kube.apimetrics import ERROR_CODE, APIMetrics
from app.kube.proxy import proxy_for
from app.kube.ratelimit import TokenBucket

__all__ = [
    "COORDINATION_LEASES",
    "CORE_NAMESPACES",
    "CORE_NODES",
    "CORE_PODS",
    "DISRUPTION_BUDGET_CAUSE",
    "EVENTS",
    "POLICY_PDBS",
    "ConflictError",
    "GoneError",
    "KubeAPIError",
    "KubeClient",
    "NotFoundError",
    "Resource",
    "TransportError",
    "WatchIdle",
    "kubeconfig_paths",
]

log = logging.getLogger(__name__)

_AUTH = ["BearerToken"]


class KubeAPIError(Exception):
    """A Kubernetes API call failed. ``status``: HTTP status code (0: no answer)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        retry_after: int | None = None,
        *,
        resent: bool = False,
        causes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.resent = resent
        """The answer is to aiohttp's second try of a write (``WRITES_SENT_AGAIN``): the first went out on
        a connection that closed before its answer, and the server may have carried it out."""
        self.causes = causes
        """The types of the answer's ``details.causes`` (``DISRUPTION_BUDGET_CAUSE``)."""

    @property
    def maybe_done(self) -> bool:
        """The request may have been carried out: a 5xx can come after the write was stored (a proxy's
        gateway timeout, or the server's), a 2xx whose body does not read was, and any answer to a write's
        second try says nothing of the first; a writer reads before it rolls back."""
        return self.resent or self.status >= 500 or 200 <= self.status <= 299


class ConflictError(KubeAPIError):
    """409 Conflict: a precondition (resourceVersion, UID) failed or the change is not allowed now."""


class GoneError(KubeAPIError):
    """410 Gone: the requested resourceVersion has been compacted; relist."""


class NotFoundError(KubeAPIError):
    """404 Not Found."""


class TransportError(KubeAPIError):
    """No HTTP answer. ``sent`` is False when the request never reached the server (connect failure)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(0, "Transport", message)
        self.sent = sent

    @property
    def maybe_done(self) -> bool:
        return self.sent


class WatchIdle(TransportError):
    """A watch received nothing, not even a bookmark, for its read timeout (``watch_read_timeout``).

    The API server sends bookmarks to a healthy watch, so the connection is taken for dead: the informer
    re-watches at once, where other transport errors back off first."""

    def __init__(self, message: str) -> None:
        super().__init__(message, sent=True)


_BY_STATUS: dict[int, type[KubeAPIError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError}


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``group`` ("" for core), ``version``, ``plural`` (URL name), ``kind``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """``/api/v1/namespaces/ns/pods/name/binding`` and the like; no namespace = all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


CORE_NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CORE_NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
CORE_PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
COORDINATION_LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
POLICY_PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)


async def review(client: Any, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a TokenReview / SubjectAccessReview ``body`` (``tokenreviews``, ``subjectaccessreviews``) and
    return the answer, for ``app.http.auth``. Raises KubeAPIError."""
    group = str(body["apiVersion"]).split("/")[0]
    answer: dict[str, Any] = await client.create(
        Resource(group, "v1", plural, str(body["kind"]), namespaced=False), None, body
    )
    return answer


def kubeconfig_paths(explicit: Path | None) -> tuple[Path, ...]:
    """``explicit``, else every entry of ``$KUBECONFIG`` (merged as kubectl merges them), else () (the
    in-cluster configuration)."""
    if explicit is not None:
        return (explicit,)
    env = os.environ.get("KUBECONFIG", "")
    return tuple(Path(p) for p in env.split(ENV_KUBECONFIG_PATH_SEPARATOR) if p)


class _SkippedKubeconfig(kube_config.ConfigException):
    """A kubeconfig file that is missing or empty: an error alone, skipped in a ``$KUBECONFIG`` list (as
    kubectl skips it)."""


def _check_kubeconfig(path: Path) -> Mapping[str, Any]:
    """The kubeconfig document of ``path``. Raises ConfigException naming ``path`` when it cannot be a
    kubeconfig: unreadable, empty (comments only), not YAML, not a mapping (``_SkippedKubeconfig`` when
    missing or empty). kubernetes-asyncio's own messages say none of that ("'NoneType' object does not
    support item assignment" for an empty file)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise _SkippedKubeconfig(f"{path}: no such file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise kube_config.ConfigException(
            f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}"
        ) from e
    except yaml.YAMLError as e:
        raise kube_config.ConfigException(f"{path}: not valid YAML: {' '.join(str(e).split())}") from e
    if document is None:
        raise _SkippedKubeconfig(f"{path}: the kubeconfig file is empty")
    if not isinstance(document, Mapping):
        raise kube_config.ConfigException(
            f"{path}: not a kubeconfig: expected a mapping (apiVersion, clusters, users, contexts), "
            f"got a {type(document).__name__}"
        )
    return document


def _kubeconfig_files(paths: Sequence[Path]) -> tuple[list[Path], list[Mapping[str, Any]], str | None]:
    """The files of ``paths`` kubernetes-asyncio merges, their documents, and the current context kubectl
    takes from them: the first one set (the library would take the last). One file must be a usable
    kubeconfig; of several (``$KUBECONFIG=a:b``), missing and empty ones are skipped. Raises ConfigException
    naming the file, or every file when none is left."""
    usable, documents, skipped, current = [], [], [], None
    for path in paths:
        try:
            document = _check_kubeconfig(path)
        except _SkippedKubeconfig as e:
            if len(paths) == 1:
                raise
            skipped.append(str(e))
            continue
        usable.append(path)
        documents.append(document)
        current = current or document.get("current-context") or None
    if not usable:
        raise kube_config.ConfigException(f"no usable kubeconfig in $KUBECONFIG: {'; '.join(skipped)}")
    return usable, documents, current


def _named(documents: Sequence[Mapping[str, Any]], section: str) -> dict[str, Mapping[str, Any]]:
    """The ``section`` entries (contexts, clusters) of the merged files by name, the first file's entry
    winning, as kubectl merges them."""
    entries: dict[str, Mapping[str, Any]] = {}
    for document in documents:
        listed = document.get(section)
        for entry in listed if isinstance(listed, list) else ():
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                entries.setdefault(entry["name"], entry)
    return entries


def _check_context(
    files: Sequence[Path], documents: Sequence[Mapping[str, Any]], context: str | None
) -> None:
    """Raise ConfigException when ``context`` (else the current one) or its cluster is in none of the
    merged files, naming them all: kubernetes-asyncio names only the first (``Expected object with name x
    in a/contexts list``) and says nothing of a missing current-context but ``Expected key``."""
    where = ENV_KUBECONFIG_PATH_SEPARATOR.join(map(str, files))
    contexts = _named(documents, "contexts")
    listed = f"(its contexts: {', '.join(contexts) or 'none'})"
    if context is None:
        raise kube_config.ConfigException(
            f"the kubeconfig {where} has no current-context: name one with --context {listed}"
        )
    if context not in contexts:
        raise kube_config.ConfigException(f'context "{context}" is not in the kubeconfig {where} {listed}')
    spec = contexts[context].get("context")
    cluster = spec.get("cluster") if isinstance(spec, Mapping) else None
    if not isinstance(cluster, str):
        raise kube_config.ConfigException(
            f'context "{context}" in the kubeconfig {where}: its context must be a mapping naming a cluster'
        )
    if cluster not in _named(documents, "clusters"):
        raise kube_config.ConfigException(
            f'context "{context}": cluster "{cluster}" is not in the kubeconfig {where}'
        )


RETRY_AFTER_ATTEMPTS = 10
"""How many times a request is sent again on ``Retry-After`` (client-go's ``maxRetries``)."""

RETRY_AFTER_MAX_SECONDS = 10
"""A longer ``Retry-After`` is left to the caller (the error carries it), so that no request waits long on
what a server says; kube-apiserver's priority and fairness says 1."""

RETRY_AFTER_STATUS = 429
"""The answer of a request turned away before it was carried out (kube-apiserver's priority and fairness,
its shutdown), unless it names a ``DISRUPTION_BUDGET_CAUSE``: the Eviction API's answer for a
PodDisruptionBudget (``retry=False`` for evictions). client-go retries every 5xx with
``Retry-After`` too; a 5xx can come after a write was stored (a proxy's gateway timeout, kube-apiserver's
504 while its handler still commits), so a writer here reads rather than writes again
(``KubeAPIError.maybe_done``)."""


def _retry_after_seconds(header: str | None) -> int | None:
    """``Retry-After`` as client-go reads it (``strconv.Atoi``: ASCII digits with an optional sign), or
    None; a negative number means no wait."""
    if header is None or not _WHOLE_SECONDS.fullmatch(header.strip()):
        return None
    return max(int(header), 0)


_WHOLE_SECONDS = re.compile(r"[+-]?[0-9]+")


WRITES_SENT_AGAIN = frozenset({"PUT", "DELETE"})
"""The writes aiohttp sends a second time on a new connection when the first's closes before its answer
(RFC 9112's retry of an idempotent request; aiohttp retries GET too, which carries nothing out)."""

DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
"""The cause the Eviction API's 429 names when a PodDisruptionBudget refuses (policy/v1
``DisruptionBudgetCause``): the budget's answer, not a turn-away, whatever its ``Retry-After`` (10 while the
budget's generation is not observed yet)."""


def _retry_wait(error: KubeAPIError) -> int | None:
    """Seconds to wait before sending the request again, or None: a 429 turning the request away that says
    how long, up to ``RETRY_AFTER_MAX_SECONDS``, unless it answers aiohttp's second try (whose first the
    caller reads)."""
    wait = error.retry_after
    if error.status != RETRY_AFTER_STATUS or wait is None or wait > RETRY_AFTER_MAX_SECONDS or error.resent:
        return None
    return wait


def _status_error(status: int, body: bytes, retry_after: int | None, resent: bool) -> KubeAPIError:
    reason, message = "", body.decode("utf-8", "replace")[:500]
    causes: tuple[str, ...] = ()
    try:
        parsed = orjson.loads(body)
        if isinstance(parsed, dict):
            reason = str(parsed.get("reason") or "")
            message = str(parsed.get("message") or message)
            causes = _cause_types(parsed.get("details"))
    except orjson.JSONDecodeError:
        pass
    error = _BY_STATUS.get(status, KubeAPIError)
    return error(status, reason, message, retry_after, resent=resent, causes=causes)


def _cause_types(details: Any) -> tuple[str, ...]:
    """The types of a Status's ``details.causes``: metav1.StatusCause serialises its ``Type`` as
    ``reason``."""
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    return tuple(str(c.get("reason") or "") for c in causes if isinstance(c, dict))


_READ_BUFFER_BYTES = 2**21
"""As kubernetes-asyncio's session: a watch event's line may hold an object up to etcd's 1.5 MiB limit."""


def _ignore_environment_per_request(api: ApiClient) -> None:
    """Give ``api`` a session on the same connector that does not consult the environment per request,
    with the environment's proxy for the API server resolved now."""
    rest = api.rest_client
    connector = rest.pool_manager.connector
    rest.pool_manager.detach()  # closes that session without closing the connector, which moves over
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=_READ_BUFFER_BYTES
    )
    # A kubeconfig's proxy-url comes first.
    if not rest.proxy and (proxy := proxy_for(api.configuration.host or "")):
        rest.proxy = proxy


class KubeClient:
    """Raw, orjson-parsed calls to one API server. Create with ``connect`` inside the event loop that uses it.

    ``request_timeout``: total seconds for one non-watch request; ``connect_timeout``: seconds to open a
    connection; ``watch_read_timeout``: seconds a watch may go without receiving a byte; ``metrics``: counts
    every request (``app.kube.apimetrics``); ``rate_limit``: the token bucket every request waits on (None:
    none); ``step_aside``: called before every request (``app.scheduling.answerfirst``).
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        request_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        watch_read_timeout: float = 90.0,
        metrics: APIMetrics | None = None,
        rate_limit: TokenBucket | None = None,
        step_aside: Callable[[], None] = lambda: None,
    ) -> None:
        self._api = api
        self._metrics = metrics
        self._rate_limit = rate_limit
        self._step_aside = step_aside
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._watch_timeout = aiohttp.ClientTimeout(
            sock_connect=connect_timeout, sock_read=watch_read_timeout
        )

    @classmethod
    async def connect(
        cls,
        kubeconfig: Path | Sequence[Path] | None = None,
        *,
        context: str | None = None,
        in_cluster: bool = False,
        request_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        watch_read_timeout: float = 90.0,
        metrics: APIMetrics | None = None,
        rate_limit: TokenBucket | None = None,
        step_aside: Callable[[], None] = lambda: None,
    ) -> KubeClient:
        """Load the kubeconfig (``kubeconfig``: one file or several to merge, else ``$KUBECONFIG``'s
        files, merged as kubectl merges them) or the in-cluster configuration.

        Raises ``kubernetes_asyncio.config.ConfigException`` (or OSError) when neither can be loaded.
        """
        configuration = Configuration()
        paths = (kubeconfig,) if isinstance(kubeconfig, Path) else tuple(kubeconfig or ())
        paths = () if in_cluster else paths or kubeconfig_paths(None)
        if paths:
            files, documents, current = _kubeconfig_files(paths)
            _check_context(files, documents, context or current)
            await kube_config.load_kube_config(
                config_file=ENV_KUBECONFIG_PATH_SEPARATOR.join(map(str, files)),
                context=context or current,
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            kube_config.load_incluster_config(client_configuration=configuration)
        api = ApiClient(configuration)
        _ignore_environment_per_request(api)
        return cls(
            api,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            watch_read_timeout=watch_read_timeout,
            metrics=metrics,
            rate_limit=rate_limit,
            step_aside=step_aside,
        )

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def close(self) -> None:
        await self._api.close()

    # --- plumbing -------------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | None = None,
        retry: bool = True,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the open response (status checked). Raises KubeAPIError.

        With ``retry``, a request turned away (``RETRY_AFTER_STATUS``) with a whole number of seconds in
        ``Retry-After`` is sent again after that wait, up to ``RETRY_AFTER_ATTEMPTS`` times, each time
        through the rate limit, as client-go does (``rest/with_retry.go``): kube-apiserver's priority and
        fairness turns requests away with 429 and ``Retry-After: 1`` under load, and a bind failed for
        that would be rolled back and retried by kube-scheduler a backoff later."""
        retries = 0
        while True:
            response, resent = await self._send_once(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
            if 200 <= response.status <= 299:
                return response
            try:
                data = await response.read()
            except (aiohttp.ClientError, TimeoutError):
                data = b""
            finally:
                response.release()
            retry_after = _retry_after_seconds(response.headers.get("Retry-After"))
            error = _status_error(response.status, data, retry_after, resent)
            wait = _retry_wait(error) if retry else None
            if wait is None or retries == RETRY_AFTER_ATTEMPTS:
                raise error
            retries += 1
            log.info("%s %s: %d, retry %d in %ds", method, path, response.status, retries, wait)
            await asyncio.sleep(wait)

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Mapping[str, Any] | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout | None,
    ) -> tuple[aiohttp.ClientResponse, bool]:
        """One attempt: the open response, whatever its status, and whether it answers aiohttp's second
        try of a write (``WRITES_SENT_AGAIN``), whose first the server may have carried out. Raises
        TransportError.

        The per-request middleware sees each of aiohttp's tries. A second try may also follow a first the
        server never read (a kept-alive connection closed as it was reused): counted as maybe carried out
        all the same, the safe side."""
        api, rest = self._api, self._api.rest_client
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": content_type}
        self._step_aside()
        if self._rate_limit is not None:
            await self._rate_limit.take()
        tries = 0

        async def counted(
            request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
        ) -> aiohttp.ClientResponse:
            nonlocal tries
            tries += 1
            return await handler(request)

        started, code = time.perf_counter(), ERROR_CODE
        try:
            await api.update_params_for_auth(headers, [], _AUTH)
            url = f"{api.configuration.host}{path}"
            response: aiohttp.ClientResponse = await rest.pool_manager.request(
                method,
                f"{url}?{urlencode(query)}" if query else url,
                headers=headers,
                data=orjson.dumps(dict(body)) if body is not None else None,
                timeout=timeout or self._timeout,
                proxy=rest.proxy or None,
                proxy_headers=rest.proxy_headers or None,
                server_hostname=rest.server_hostname or None,
                middlewares=(counted,),
            )
            code = str(response.status)
        except aiohttp.ClientConnectorError as e:
            # Taken at its word even on a write's second try, whose first the server may have carried out:
            # while kube-apiserver is down every request fails so, and a write counted as maybe carried out
            # keeps its devices held until its claim changes, up to the reservation TTL when nothing can be
            # read (a CI run's fill-up across a kube-apiserver restart stalled 10 minutes on one).
            raise TransportError(f"{method} {path}: cannot connect: {e}", sent=False) from e
        except aiohttp.SocketTimeoutError as e:
            # Only watches have a read timeout: the server took the watch and sent not even its headers.
            raise WatchIdle(f"{method} {path}: {e}") from e
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}", sent=True) from e
        finally:
            if self._metrics is not None:
                self._metrics.observe(method, path, query, code, time.perf_counter() - started)
        return response, tries > 1 and method in WRITES_SENT_AGAIN

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._send(method, path, **kwargs)
        try:
            data = await response.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{method} {path}: reading the answer: {e}", sent=True) from e
        finally:
            response.release()
        try:
            parsed = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError as e:
            raise KubeAPIError(response.status, "BadResponse", f"{method} {path}: not JSON: {e}") from e
        if not isinstance(parsed, dict):
            raise KubeAPIError(response.status, "BadResponse", f"{method} {path}: not a JSON object")
        return parsed

    # --- discovery ------------------------------------------------------------------------------------

    async def api_group(self, group: str) -> dict[str, Any]:
        """``GET /apis/{group}`` (an APIGroup: ``versions[].version``). NotFoundError when not served."""
        return await self._json("GET", f"/apis/{group}")

    async def api_resources(self, group: str, version: str) -> dict[str, Any]:
        """``GET /apis/{group}/{version}`` (an APIResourceList: ``resources[].name/kind/namespaced``)."""
        return await self._json("GET", f"/apis/{group}/{version}")

    # --- reads ----------------------------------------------------------------------------------------

    async def list(
        self, resource: Resource, *, limit: int = 500, continue_: str | None = None
    ) -> dict[str, Any]:
        """One page of a list across all namespaces: ``{"metadata": {"resourceVersion", "continue"},
        "items": [...]}``. Items carry no ``kind``/``apiVersion`` (as the API server sends them)."""
        query = [("limit", str(limit))]
        if continue_:
            query.append(("continue", continue_))
        return await self._json("GET", resource.path(), query=query)

    async def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) after ``resource_version``, with bookmarks.

        The server ends the stream after about ``timeout_seconds``; the generator then returns. An ``ERROR``
        event is raised as the matching KubeAPIError (410 → GoneError); a stream silent for the read timeout,
        or sending only blank lines for that long, as WatchIdle; a line that is not a JSON object with an
        object in ``object``, an ERROR event without an integer code or a line over the read buffer as
        ``KubeAPIError(200, "BadResponse")``.
        Close the generator (``aclose``) to stop early.
        """
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        response = await self._send("GET", resource.path(), query=query, timeout=self._watch_timeout)
        idle = self._watch_timeout.sock_read
        last_event = time.monotonic()
        try:
            while True:
                try:
                    line = await response.content.readline()
                except aiohttp.SocketTimeoutError as e:
                    raise WatchIdle(f"watch {resource.plural}: nothing received for {idle:g}s") from e
                except (aiohttp.ClientError, TimeoutError) as e:
                    raise TransportError(
                        f"watch {resource.plural}: {type(e).__name__}: {e}", sent=True
                    ) from e
                except aiohttp.http_exceptions.LineTooLong as e:
                    # BadResponse, not TransportError: the bytes arrived, it is what the server sent that
                    # cannot be read (an event over any object etcd stores), and the next watch from this
                    # resourceVersion would get it again.
                    raise KubeAPIError(200, "BadResponse", f"watch {resource.plural}: {e.message}") from e
                if not line:
                    return
                if not line.strip():
                    # A keep-alive newline (a proxy's) restarts the socket read timeout without being an
                    # event: a watch that gets nothing else is as dead as a silent one.
                    if idle is not None and time.monotonic() - last_event > idle:
                        raise WatchIdle(f"watch {resource.plural}: only blank lines for {idle:g}s")
                    continue
                last_event = time.monotonic()
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise KubeAPIError(200, "BadResponse", f"watch {resource.plural}: bad event: {e}") from e
                if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                    raise KubeAPIError(
                        200, "BadResponse", f"watch {resource.plural}: not an event: {line[:200]!r}"
                    )
                if event.get("type") == "ERROR":
                    status = event["object"]
                    try:
                        code = int(status.get("code") or 500)
                    except (TypeError, ValueError, OverflowError) as e:
                        raise KubeAPIError(
                            200, "BadResponse", f"watch {resource.plural}: bad ERROR event: {line[:200]!r}"
                        ) from e
                    raise _BY_STATUS.get(code, KubeAPIError)(
                        code, str(status.get("reason") or ""), str(status.get("message") or "watch error")
                    )
                yield event
        finally:
            response.close()

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._json("GET", resource.path(namespace, name))

    # --- writes ---------------------------------------------------------------------------------------

    async def replace(
        self, resource: Resource, obj: Mapping[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        """``PUT`` the whole object (or its ``status``). A ``metadata.resourceVersion`` in ``obj`` is a
        precondition: ConflictError when the object changed since."""
        meta = obj.get("metadata") or {}
        path = resource.path(meta.get("namespace"), str(meta.get("name")), subresource)
        return await self._json("PUT", path, body=obj)

    async def create(
        self,
        resource: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        name: str | None = None,
        subresource: str | None = None,
        retry: bool = True,
    ) -> dict[str, Any]:
        """``POST`` a new object, or to a subresource of ``name`` (``pods/{name}/binding``); ``retry``: as
        ``_send``'s (the preemptor waits out nothing: between evictions it checks that the pod still needs
        them)."""
        path = resource.path(namespace, name, subresource) if name else resource.path(namespace)
        return await self._json("POST", path, body=body, retry=retry)

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Strategic-merge ``PATCH`` (built-in kinds only: core, events.k8s.io)."""
        return await self._json(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=body,
            content_type="application/strategic-merge-patch+json",
        )

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> dict[str, Any]:
        """``DELETE``; ``uid`` as a precondition (ConflictError when the object was recreated)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        return await self._json("DELETE", resource.path(namespace, name), body=body)
