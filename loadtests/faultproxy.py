"""``FaultProxy``: plain HTTP on 127.0.0.1 in front of a real kube-apiserver, for the chaos run against the
e2e control plane (``loadtests.chaos --e2e``). The extender's kubeconfig points at the proxy, which passes
every request on (its bearer token included) and, when told, does to them what the fake API server can do
to its own (``tests.app.kube.fakeapi.FaultPlan``): answer an error status (with ``Retry-After``, or after
forwarding the request), forward a write and drop the connection before the answer (the write is done, the
extender does not know), hold a request back. On the watches it can also replay events it passed on before
(stale versions, or the latest again: duplicates) and end the open watches. When kube-apiserver is down it
answers 503 with ``Retry-After: 1``, which the extender's client waits out up to ten times before its
caller sees it.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections import Counter
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from tests.app.kube.fakeapi import FaultPlan, drop, fault_answer, status_body

__all__ = ["FaultProxy"]

_REQUEST_HEADERS = ("Authorization", "Content-Type", "Accept")
_ANSWER_HEADERS = ("Content-Type", "Retry-After")
_HISTORY = 500
"""Events kept per watched collection for replays."""


class FaultProxy(FaultPlan):
    """Start with ``start()`` (returns its URL), stop with ``stop()``; ``ca``: kube-apiserver's CA."""

    def __init__(self, upstream: str, ca: Path) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self._tls = ssl.create_default_context(cafile=str(ca))
        self._history: dict[str, list[bytes]] = {}
        self._watches: dict[asyncio.Task[object], tuple[str, web.StreamResponse]] = {}
        self.injected: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        # No total timeout: watches stay open for minutes.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_connect=5))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # Handlers are cancelled when the extender goes away, so the watch upstream ends with it.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def drop_watches(self) -> None:
        """End every open watch (the extender watches again from its last resourceVersion)."""
        for task in list(self._watches):
            task.cancel()

    async def replay(self, collection: str, count: int, rng: random.Random) -> None:
        """Send ``count`` events of ``collection`` (a path's last part: ``resourceclaims``) seen before to
        its open watches again, as a watch cache or a proxy may: each an earlier one (a stale version) or,
        one time in four, the latest (a duplicate)."""
        for key, response in list(self._watches.values()):
            history = self._history.get(key) or []
            if not key.endswith(f"/{collection}") or not history:
                continue
            for _ in range(count):
                duplicate = rng.random() < 0.25
                line = history[-1] if duplicate else rng.choice(history)
                try:
                    await response.write(line)
                except (ConnectionError, RuntimeError):  # the watch ended meanwhile
                    break
                self.injected["duplicate event" if duplicate else "stale event"] += 1

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        fault = self.take_fault(request.method, request.path)
        if fault is not None and fault.gate is not None:
            await fault.gate.wait()
            fault = None
        elif fault is not None and not fault.disconnect and not fault.after:
            self.injected[f"{fault.status} on {request.method}"] += 1
            return fault_answer(fault, fault.reason)
        headers = {name: request.headers[name] for name in _REQUEST_HEADERS if name in request.headers}
        try:
            upstream = await self._session.request(
                request.method,
                self.upstream + request.path_qs,
                data=body or None,
                headers=headers,
                ssl=self._tls,
            )
        except aiohttp.ClientError as e:
            unavailable = status_body(503, "ServiceUnavailable", f"kube-apiserver unreachable: {e}")
            return web.json_response(unavailable, status=503, headers={"Retry-After": "1"})
        async with upstream:
            if fault is not None and fault.disconnect:  # the server has done the write, its answer is lost
                await upstream.read()
                self.injected[f"{request.method} answer lost"] += 1
                return drop(request)
            if fault is not None:  # ``after``: the server has done the write, the answer says it failed
                await upstream.read()
                self.injected[f"{fault.status} after {request.method}"] += 1
                return fault_answer(fault, fault.reason)
            if request.query.get("watch") in ("true", "1") and upstream.status == 200:
                return await self._stream(request, upstream)
            answer = {name: upstream.headers[name] for name in _ANSWER_HEADERS if name in upstream.headers}
            return web.Response(body=await upstream.read(), status=upstream.status, headers=answer)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        """Pass a watch on line by line (one event each), keeping its object events for replays."""
        response = web.StreamResponse(headers={"Content-Type": upstream.headers.get("Content-Type", "")})
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        key = request.path
        self._watches[task] = (key, response)
        history = self._history.setdefault(key, [])
        pending = b""
        try:
            async for chunk in upstream.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in filter(None, lines):
                    event = line + b"\n"
                    if orjson.loads(line).get("type") in ("ADDED", "MODIFIED"):
                        history.append(event)
                        del history[:-_HISTORY]
                    await response.write(event)
        except (ConnectionError, aiohttp.ClientError):
            pass  # either side went away: the extender watches again
        finally:
            del self._watches[task]
        return response
