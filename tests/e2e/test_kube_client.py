"""e2e.kube's collection delete, against a mock transport (no control plane: runs in ``make test``)."""

from __future__ import annotations

import threading

import httpx
import pytest

from e2e.kube import ApiError, Kube, ThreadClients


def _kube(answers: list[httpx.Response | Exception]) -> tuple[Kube, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    kube = Kube.__new__(Kube)  # without __init__: it builds a TLS context from a CA file
    kube.http = httpx.Client(base_url="https://kube.invalid:6443", transport=httpx.MockTransport(handle))
    return kube, sent


def test_a_collection_delete_cut_by_the_request_timeout_is_sent_again() -> None:
    cut = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    kube, sent = _kube([cut, httpx.Response(504, json={"message": "timeout"}), httpx.Response(200, json={})])
    kube.delete_all("Pod", "ml")
    assert [r.url.path for r in sent] == ["/api/v1/namespaces/ml/pods"] * 3


def test_a_refused_connection_is_raised_at_once() -> None:
    kube, sent = _kube([httpx.ConnectError("connection refused")])
    with pytest.raises(httpx.ConnectError):
        kube.delete_all("Pod", "ml")
    assert len(sent) == 1


def test_a_delete_cut_every_time_stops_after_its_attempts() -> None:
    kube, sent = _kube([httpx.ReadTimeout("read timed out")] * 3)
    with pytest.raises(TimeoutError, match="not all deleted in 3 collection deletes"):
        kube.delete_all("Pod", "ml", attempts=3)
    assert len(sent) == 3


def test_another_error_is_raised() -> None:
    kube, _ = _kube([httpx.Response(403, json={"message": "forbidden"})])
    with pytest.raises(ApiError, match="403 forbidden"):
        kube.delete_all("Pod", "ml")


def test_thread_clients_gives_each_thread_its_own_client_and_closes_them_all() -> None:
    made: list[Kube] = []

    def make() -> Kube:
        kube, _ = _kube([])
        made.append(kube)
        return kube

    seen: dict[str, list[int]] = {}

    def ask(name: str) -> None:
        seen[name] = [id(clients.get()) for _ in range(3)]

    with ThreadClients(make) as clients:
        threads = [threading.Thread(target=ask, args=(f"t{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(len(set(ids)) == 1 for ids in seen.values())  # one client per thread, kept
        assert len({ids[0] for ids in seen.values()}) == 3 == len(made)  # none shared between threads
        assert not any(kube.http.is_closed for kube in made)
    assert all(kube.http.is_closed for kube in made)
