"""The admission webhook (``app.http.webhook``, ``app.scheduling.admission``): which pods get
``schedulerName: dra-scheduler`` (the patch decoded and applied to the pod as the API server would) and
which are refused, answers carrying the request's uid, bad bodies refused naming the field, and the
listener over HTTPS from ``serve --webhook-bind-address``.

Expected answers come from the feature's rules (docs/webhook.md): DRA use is ``spec.resourceClaims`` or a
non-zero request of an extended resource some DeviceClass maps; only pods of the default scheduler are
patched; any scheduler but ours is refused by ``/validate``."""

from __future__ import annotations

import base64
import copy
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trustme

from allocator.cel.expr_engine import ExprEngine
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.cli import main as cli
from app.config.settings import ServerSettings
from app.http.metrics import Metrics
from app.http.server import ServerThread, listen, server_config
from app.http.webhook import create_webhook_app
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.app.test_tls_reload import _der, _install
from tests.builders import device_class
from tests.ports import EXAMPLE_CLUSTER, free_ports

Obj = dict[str, Any]
GPU = "example.com/gpu"
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def _service(gates: FeatureGates | None = None) -> SchedulingService:
    gpu = device_class("gpu.example.com", 'device.driver == "gpu.example.com"')
    gpu["spec"]["extendedResourceName"] = GPU
    plain = device_class("plain.example.com")
    state = ClusterState.from_objects([("DeviceClass", gpu), ("DeviceClass", plain)], gates)
    return SchedulingService(state, SelectorCache(ExprEngine()))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_webhook_app(_service(), ("dra-scheduler", "dra-other"), 64 << 10)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://webhook") as test_client:
        yield test_client


def _pod(
    scheduler: str | None = "default-scheduler",
    claims: tuple[str, ...] = (),
    resources: Obj | None = None,
    init_resources: Obj | None = None,
    named: bool = False,
) -> Obj:
    spec: Obj = {"containers": [{"name": "app", "image": "busybox", "resources": resources or {}}]}
    if init_resources is not None:
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": init_resources}]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if claims:
        source = "resourceClaimName" if named else "resourceClaimTemplateName"
        suffix = "claim" if named else "template"
        spec["resourceClaims"] = [{"name": c, source: f"{c}-{suffix}"} for c in claims]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}, "spec": spec}


def _review(pod: Obj, operation: str = "CREATE", kind: str = "Pod") -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team",
            "name": "p",
            "operation": operation,
            "object": copy.deepcopy(pod),
        },
    }


async def _answer(client: httpx.AsyncClient, path: str, review: Obj) -> Obj:
    response = await client.post(path, content=orjson.dumps(review))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert body["response"]["uid"] == UID
    result: Obj = body["response"]
    return result


def _apply(pod: Obj, answer: Obj) -> Obj:
    """The pod after the answer's JSONPatch, applied as RFC 6902 says (only ``add`` of an object member)."""
    patched = copy.deepcopy(pod)
    if "patch" not in answer:
        return patched
    assert answer["patchType"] == "JSONPatch"
    for op in orjson.loads(base64.b64decode(answer["patch"])):
        assert op["op"] == "add", op
        *parents, last = op["path"].lstrip("/").split("/")
        target = patched
        for part in parents:
            target = target[part]
        target[last] = op["value"]
    return patched


CLAIM = _pod(claims=("gpu",))
EXTENDED = _pod(resources={"limits": {GPU: "1"}})
IMPLICIT = _pod(resources={"requests": {"deviceclass.resource.kubernetes.io/plain.example.com": "2"}})
INIT_EXTENDED = _pod(init_resources={"requests": {GPU: "1"}})

# (name, pod, schedulerName after /mutate, /validate's message or "" when allowed)
SHAPES = [
    (
        "claim, default scheduler",
        CLAIM,
        "dra-scheduler",
        'pod uses a ResourceClaim of template "gpu-template" (spec.resourceClaims[0] "gpu") but '
        'spec.schedulerName is "default-scheduler"',
    ),
    (
        "named claim",
        _pod(claims=("gpu",), named=True),
        "dra-scheduler",
        'ResourceClaim "gpu-claim" (spec.resourceClaims[0] "gpu")',
    ),
    ("claim, no schedulerName", _pod(None, ("gpu",)), "dra-scheduler", '"default-scheduler"'),
    ("claim, empty schedulerName", _pod("", ("gpu",)), "dra-scheduler", '"default-scheduler"'),
    (
        "extended resource a class maps",
        EXTENDED,
        "dra-scheduler",
        'extended resource "example.com/gpu" (DeviceClass "gpu.example.com")',
    ),
    (
        "implicit extended resource",
        IMPLICIT,
        "dra-scheduler",
        'extended resource "deviceclass.resource.kubernetes.io/plain.example.com"',
    ),
    ("init container's extended resource", INIT_EXTENDED, "dra-scheduler", '"example.com/gpu"'),
    ("claim, another scheduler", _pod("volcano", ("gpu",)), "volcano", 'spec.schedulerName is "volcano"'),
    ("claim, our scheduler", _pod("dra-scheduler", ("gpu",)), "dra-scheduler", ""),
    ("claim, our second profile", _pod("dra-other", ("gpu",)), "dra-other", ""),
    ("no claims", _pod(), "default-scheduler", ""),
    ("no claims, another scheduler", _pod("volcano"), "volcano", ""),
    (
        "extended resource no class maps",
        _pod(resources={"limits": {"other.io/fpga": "1"}}),
        "default-scheduler",
        "",
    ),
    ("zero extended resource", _pod(resources={"limits": {GPU: "0"}}), "default-scheduler", ""),
    ("cpu only", _pod(resources={"requests": {"cpu": "1"}}), "default-scheduler", ""),
]


@pytest.mark.parametrize(("pod", "scheduler", "refused"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
async def test_mutate_and_validate_each_pod_shape(client, pod, scheduler, refused):
    mutated = await _answer(client, "/mutate", _review(pod))
    assert mutated["allowed"] is True
    after = _apply(pod, mutated)
    assert after["spec"].get("schedulerName") == scheduler
    assert {k: v for k, v in after["spec"].items() if k != "schedulerName"} == {
        k: v for k, v in pod["spec"].items() if k != "schedulerName"
    }, "nothing but schedulerName changes"

    validated = await _answer(client, "/validate", _review(pod))
    assert "patch" not in validated
    assert validated["allowed"] is (not refused)
    if refused:
        assert validated["status"]["code"] == 403
        assert refused in validated["status"]["message"]
        assert 'set spec.schedulerName: "dra-scheduler"' in validated["status"]["message"]
    # After the mutating webhook (mode both), the same pod passes validation unless aimed elsewhere.
    again = await _answer(client, "/validate", _review(after))
    assert again["allowed"] is (
        after["spec"]["schedulerName"] in ("dra-scheduler", "dra-other") or not refused
    )


async def test_answers_are_counted_by_endpoint_and_outcome():
    service = _service()
    metrics = Metrics(service)
    app = create_webhook_app(service, ("dra-scheduler",), 64 << 10, metrics.admission_reviews)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://w") as client:
        for pod in (CLAIM, CLAIM, _pod()):
            await _answer(client, "/mutate", _review(pod))
        await _answer(client, "/validate", _review(CLAIM))
        await _answer(client, "/validate", _review(CLAIM, "UPDATE"))  # not a creation: not counted
    value = metrics.registry.get_sample_value
    counts = {
        (endpoint, outcome): value(
            "dra_extender_admission_reviews_total", {"endpoint": endpoint, "outcome": outcome}
        )
        for endpoint in ("mutate", "validate")
        for outcome in ("patched", "refused", "allowed")
    }
    assert counts == {
        ("mutate", "patched"): 2,
        ("mutate", "refused"): 0,
        ("mutate", "allowed"): 1,
        ("validate", "patched"): 0,
        ("validate", "refused"): 1,
        ("validate", "allowed"): 0,
    }


@pytest.mark.parametrize(("operation", "kind"), [("UPDATE", "Pod"), ("DELETE", "Pod"), ("CREATE", "Binding")])
async def test_only_pod_creation_is_looked_at(client, operation, kind):
    for path in ("/mutate", "/validate"):
        answer = await _answer(client, path, _review(CLAIM, operation, kind))
        assert answer == {"uid": UID, "allowed": True}


async def test_extended_resources_are_not_dra_with_the_gate_off():
    service = _service(FeatureGates(DRAExtendedResource=False))
    app = create_webhook_app(service, ("dra-scheduler",), 64 << 10)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://w") as client:
        assert "patch" not in await _answer(client, "/mutate", _review(EXTENDED))
        assert (await _answer(client, "/validate", _review(EXTENDED)))["allowed"] is True
        assert "patch" in await _answer(client, "/mutate", _review(CLAIM))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "AdmissionReview: not JSON"),
        (b"[]", "AdmissionReview: expected an object, got list"),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}), "apiVersion"),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request: expected"),
        (
            orjson.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}}
            ),
            "request.uid: expected str, got int",
        ),
        (
            orjson.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}
            ),
            "request.uid: must not be empty",
        ),
    ],
)
async def test_a_bad_review_is_400_naming_the_field(client, body, message):
    for path in ("/mutate", "/validate"):
        response = await client.post(path, content=body)
        assert response.status_code == 400
        assert message in response.json()["Error"]


async def test_a_body_above_the_limit_is_413(client):
    review = _review(CLAIM)
    review["request"]["object"]["metadata"]["annotations"] = {"x": "y" * (64 << 10)}
    response = await client.post("/mutate", content=orjson.dumps(review))
    assert response.status_code == 413


def test_the_webhook_listener_needs_its_certificate_and_key():
    with pytest.raises(ValueError, match="webhook_bind_address, webhook_certfile, webhook_keyfile"):
        ServerSettings(webhook_bind_address="127.0.0.1:9443")
    with pytest.raises(ValueError, match="webhook_bind_address: expected host:port"):
        ServerSettings(webhook_bind_address="9443", webhook_certfile=Path("c"), webhook_keyfile=Path("k"))


def _served(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_the_listener_answers_over_https_and_serves_a_rotated_certificate(tmp_path):
    ca = trustme.CA()
    first, second = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(first, cert, key)
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = create_webhook_app(_service(), ("dra-scheduler",), 64 << 10)
    options = {"ssl_certfile": str(cert), "ssl_keyfile": str(key), "log_config": None, **server_config()}
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with (
        sock,
        ServerThread("webhook", app, sock, **options),
        httpx.Client(verify=context, timeout=10) as client,
    ):
        response = client.post(f"https://127.0.0.1:{port}/mutate", content=orjson.dumps(_review(CLAIM)))
        assert _served(port, context) == _der(first)
        _install(second, cert, key)  # as cert-manager renews the Secret
        deadline = time.monotonic() + 30
        while _served(port, context) != _der(second):
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.5)
    assert response.status_code == 200
    patch = orjson.loads(base64.b64decode(response.json()["response"]["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "dra-scheduler"}]


def test_serve_refuses_a_webhook_address_in_use(tmp_path, capsys):

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    with listen("127.0.0.1", 0) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        port = free_ports(1)[0]
        argv = [
            "serve",
            "--state",
            str(EXAMPLE_CLUSTER),
            "--port",
            str(port),
            "--webhook-bind-address",
            address,
        ]
        argv += ["--webhook-certfile", str(cert), "--webhook-keyfile", str(key)]
        assert cli.main(argv) == 2
    assert f"--webhook-bind-address {address}" in capsys.readouterr().err


def test_serve_refuses_a_webhook_key_of_another_certificate(tmp_path, capsys):
    ca = trustme.CA()
    first, second = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first.cert_chain_pems[0].write_to_path(str(cert))
    second.private_key_pem.write_to_path(str(key))
    with listen("127.0.0.1", 0) as taken:  # were the key not checked first, serve would stop here
        argv = ["serve", "--state", str(EXAMPLE_CLUSTER), "--port", str(taken.getsockname()[1])]
        argv += ["--webhook-bind-address", "127.0.0.1:9443"]
        argv += ["--webhook-certfile", str(cert), "--webhook-keyfile", str(key)]
        assert cli.main(argv) == 2
    assert (
        f"--webhook-keyfile {key}: not a PEM private key of the certificate {cert}" in capsys.readouterr().err
    )
