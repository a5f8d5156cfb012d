"""A malformed watch answer or a wild Retry-After never stops an informer, and a watch that delivers only
blank lines is replaced.

The client turns what it cannot read on a watch (a line that is not a JSON object, an ERROR event without an
integer code, a line longer than its read buffer) into a KubeAPIError; the informer retries after whatever
else escapes, and waits at most its backoff's maximum whatever the server says in Retry-After."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
from pathlib import Path

import pytest
from aiohttp import web

from app.kube.client import CORE_NODES, KubeAPIError, TransportError
from app.kube.informers import Informer
from app.state.cluster import ClusterState
from tests.app.kube.conftest import TEST_SETTINGS, FakeClock, eventually
from tests.app.kube.test_client_transport import NODE_EVENT, read_watch, stream, watch_server
from tests.app.kube.test_informers import ScriptedWatches

NODE = {"metadata": {"name": "n1", "resourceVersion": "7"}}


def start(
    source: ScriptedWatches, settings=TEST_SETTINGS, observers=()
) -> tuple[Informer, asyncio.Task[None]]:
    state, lock = ClusterState(), threading.RLock()
    informer = Informer(source, CORE_NODES, state, lock, settings, clock=FakeClock(), observers=observers)
    informer.resource_version = "5"  # watched already: no list
    return informer, asyncio.create_task(informer.run())


async def stop(task: asyncio.Task[None]) -> None:
    assert not task.done()  # still running: an informer never ends on its own
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()


# --- the informer ---------------------------------------------------------------------------------------


async def test_an_event_that_cannot_be_handled_backs_off_growing_and_watches_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the client's watch lets through and the event handling cannot take (here metadata that is a
    list) is logged with its traceback, counted and retried after a backoff that grows: the same event comes
    back with every watch from that resourceVersion, so it must not start the backoff over."""
    bad = {"type": "ADDED", "object": {"metadata": ["n1"]}}
    source = ScriptedWatches([bad], [bad], [bad], [{"type": "ADDED", "object": NODE}])
    informer, task = start(source)
    with caplog.at_level(logging.ERROR, logger="app.kube.informers"):
        try:
            await eventually(lambda: informer.state.get("Node", "n1") is not None)
        finally:
            await stop(task)
    assert source.watched_from[:4] == ["5", "5", "5", "5"]
    assert informer.stats.errors == 3 and informer.stats.lists == 0
    first, second, third = informer.stats.waits  # 0.5, 1, 2 s, each ± 20 %
    assert 0.4 <= first <= 0.6 and 0.8 <= second <= 1.2 and 1.6 <= third <= 2.4
    assert informer.stats.last_error.startswith("AttributeError")
    assert informer.resource_version == "7"
    logged = [r.exc_info[0] for r in caplog.records if r.exc_info]  # with the traceback
    assert logged == [AttributeError] * 3


@pytest.mark.parametrize(
    ("retry_after", "honoured"),
    [
        (2, 2.0),
        (0, None),  # shorter than the backoff: no tight loop
        (86_400, 5.0),  # capped at the backoff's maximum
    ],
)
async def test_retry_after_is_honoured_from_the_backoff_to_its_maximum(
    retry_after: int, honoured: float | None
) -> None:
    settings = dataclasses.replace(TEST_SETTINGS, backoff_max_seconds=5.0)
    source = ScriptedWatches(
        [KubeAPIError(429, "TooManyRequests", "slow down", retry_after)], [{"type": "ADDED", "object": NODE}]
    )
    informer, task = start(source, settings)
    try:
        await eventually(lambda: informer.state.get("Node", "n1") is not None)
    finally:
        await stop(task)
    assert informer.stats.errors == 1
    (wait,) = informer.stats.waits
    if honoured is not None:
        assert wait == honoured
    else:  # the first backoff step: 0.5 s ± 20 %
        assert 0.4 <= wait <= 0.6


# --- the client's watch -------------------------------------------------------------------------------


def answering_lines(*lines: bytes):
    """A watch handler that sends ``lines`` and then stays open."""

    async def handler(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
        response = await stream(request)
        for line in lines:
            await response.write(line)
        await release.wait()
        return response

    return handler


EVENT_LINE = json.dumps(NODE_EVENT).encode() + b"\n"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"[1, 2]\n", id="json-not-an-object"),
        pytest.param(b'"ADDED"\n', id="json-string"),
        pytest.param(b'{"type": "ERROR", "object": {"code": "abc"}}\n', id="error-code-not-a-number"),
        pytest.param(b'{"type": "ERROR", "object": {"code": [410]}}\n', id="error-code-a-list"),
        pytest.param(b'{"type": "ERROR", "object": ["Gone"]}\n', id="error-status-not-an-object"),
        pytest.param(b'{"type": "ADDED", "object": []}\n', id="object-a-list"),
        pytest.param(b'{"type": "MODIFIED"}\n', id="no-object"),
        # The bytes arrived; more than an event may hold (etcd's 1.5 MiB object limit), which the next
        # watch would get again: not a transport failure. The client's StreamReader takes up to 4 MiB.
        pytest.param(b"x" * (5 * 2**20) + b"\n", id="over-the-read-buffer"),
    ],
)
async def test_a_malformed_watch_answer_is_a_kube_api_error(tmp_path: Path, bad: bytes) -> None:
    received: list[dict] = []
    async with watch_server(tmp_path, answering_lines(EVENT_LINE, bad)) as client:
        with pytest.raises(KubeAPIError) as raised:
            await asyncio.wait_for(read_watch(client, received), 5)
    assert received == [NODE_EVENT]
    assert not isinstance(raised.value, TransportError)
    assert (raised.value.status, raised.value.reason) == (200, "BadResponse")
    assert "watch nodes" in str(raised.value) and len(str(raised.value)) < 1000


async def events_and_blank_lines(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    """An event every 0.1 s for 1 s, a blank line between each two, then the end."""
    response = await stream(request)
    for _ in range(10):
        await asyncio.sleep(0.05)
        await response.write(b"\n")
        await asyncio.sleep(0.05)
        await response.write(EVENT_LINE)
    await response.write_eof()
    return response


async def test_events_between_blank_lines_keep_a_watch_alive(tmp_path: Path) -> None:
    received: list[dict] = []
    async with watch_server(tmp_path, events_and_blank_lines) as client:
        await asyncio.wait_for(read_watch(client, received), 5)
    assert received == [NODE_EVENT] * 10


async def test_an_observer_that_raises_does_not_keep_the_others_from_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Once applied, a version is never delivered again (a replay is stale): every observer must see it."""
    seen: list[tuple[str, str]] = []

    def failing(kind: str, key: str, obj: object) -> None:
        raise RuntimeError("a bug")

    def recording(kind: str, key: str, obj: object) -> None:
        seen.append((kind, key))

    source = ScriptedWatches([{"type": "ADDED", "object": NODE}])
    informer, task = start(source, observers=[failing, recording])
    with caplog.at_level(logging.ERROR, logger="app.kube.informers"):
        try:
            await eventually(lambda: seen)
        finally:
            await stop(task)
    assert seen == [("Node", "n1")]
    assert informer.stats.errors == 1 and informer.resource_version == "7"
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError]
