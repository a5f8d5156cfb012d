"""The guardrail (docs/webhook.md) on the real kube-apiserver: it calls the extender's admission webhook over
TLS (``--webhook-bind-address``, a certificate of a CA of the test's own, the caBundle of the webhook
configuration). With the mutating webhook, a pod with a ResourceClaim and no ``schedulerName`` is created
with ``dra-scheduler`` and bound through the extender while the in-tree kube-scheduler (started beside it,
the second allocator the guardrail is against) never touches it; with the validating webhook, a pod with a
claim aimed explicitly at ``default-scheduler`` is refused with a message naming the claim and the
scheduler, and a pod without claims is created as it is.

The webhook is served by an extender of its own (a standby of the shipped Lease: it binds nothing), as
every replica of the chart's Deployment serves it. The configurations select the scenario's namespace
only, so scenarios running beside it are not affected."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e import chart, pki
from e2e.controlplane import ControlPlane, free_port
from e2e.kube import ApiError, Kube, poll
from e2e.workload import EXTENDER_SCHEDULER, Scenario, allocated_devices, in_tree_scheduler

pytestmark = pytest.mark.e2e

WEBHOOK_EXTENDER = "dra-extender-webhook"


@dataclass(frozen=True)
class Webhook:
    url: str
    """``https://127.0.0.1:<port>`` of the extender serving the webhook."""
    ca: Path
    """The CA its serving certificate is from (PEM): the configurations' caBundle."""


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """An extender serving the webhook over TLS with a certificate for 127.0.0.1."""
    directory = tmp_path_factory.mktemp("webhook-pki")
    authority = pki.Authority(directory)
    serving = authority.issue("webhook", "dra-scheduler-webhook", server_ips=("127.0.0.1",))
    port = free_port()
    control_plane.start_extender(
        f"--webhook-bind-address=127.0.0.1:{port}",
        f"--webhook-certfile={serving.cert}",
        f"--webhook-keyfile={serving.key}",
        name=WEBHOOK_EXTENDER,
        hostname="dra-scheduler-webhook",  # not the leader's identity: a standby, binds nothing
    )
    yield Webhook(f"https://127.0.0.1:{port}", authority.cert)
    control_plane.components[WEBHOOK_EXTENDER].stop()


def _configuration(kind: str, sc: Scenario, webhook: Webhook) -> dict[str, Any]:
    verb = "mutate" if kind == "Mutating" else "validate"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": f"{kind}WebhookConfiguration",
        "metadata": {"name": f"{sc.name}-{verb}"},
        "webhooks": [
            {
                "name": f"{verb}.dra-scheduler.dra-extender.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                # Fail: a webhook the API server could not call fails the pod's creation, so a pod created
                # here has been through the extender's answer.
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": sc.namespace}},
                "clientConfig": {
                    "url": f"{webhook.url}/{verb}",
                    "caBundle": base64.b64encode(webhook.ca.read_bytes()).decode(),
                },
            }
        ],
    }


def _pod(sc: Scenario, name: str, scheduler: str | None, claim: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {}}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": sc.namespace},
        "spec": spec,
    }


def _dry_run(kube: Kube, pod: dict[str, Any]) -> dict[str, Any] | ApiError:
    """The pod as the API server would create it now (admission webhooks included), or its refusal."""
    try:
        return kube.create(pod, dry_run=True)
    except ApiError as err:
        return err


@pytest.fixture
def registered(scenario: Scenario) -> Iterator[list[str]]:
    """Names of the webhook configurations the test registered; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        kind = (
            "MutatingWebhookConfiguration" if name.endswith("-mutate") else "ValidatingWebhookConfiguration"
        )
        scenario.kube.delete(kind, name)


def _register(sc: Scenario, kind: str, webhook: Webhook, registered: list[str], effective: Any) -> None:
    """Register the configuration and wait until the API server applies it (its informer, about a second):
    ``effective(dry-run answer)`` says when."""
    config = sc.kube.create(_configuration(kind, sc, webhook))
    registered.append(config["metadata"]["name"])
    probe = _pod(sc, "probe", "default-scheduler" if kind == "Validating" else None, "probe")
    poll(lambda: effective(_dry_run(sc.kube, probe)), timeout=30, what=f"{kind} webhook in effect")


def _log(plane: ControlPlane, component: str) -> str:
    return plane.components[component].log.read_text(errors="replace")


def test_webhook_keeps_dra_pods_on_the_extender(
    scenario: Scenario, webhook: Webhook, registered: list[str]
) -> None:
    plane = scenario.plane
    in_tree_scheduler(plane)  # the second allocator: it would take a DRA pod of default-scheduler
    scenario.add_nodes(1, 2)
    scenario.add_claim("forgot")
    scenario.add_claim("explicit")

    # Without the webhook the pod would be the default scheduler's (the in-tree path would allocate it).
    unguarded = scenario.kube.create(_pod(scenario, "probe", None, "forgot"), dry_run=True)
    assert unguarded["spec"]["schedulerName"] == "default-scheduler"
    # Mutating: no schedulerName -> dra-scheduler, bound by the extender, never seen by the in-tree path.
    _register(
        scenario,
        "Mutating",
        webhook,
        registered,
        lambda answer: isinstance(answer, dict) and answer["spec"]["schedulerName"] == EXTENDER_SCHEDULER,
    )
    scenario.kube.create(_pod(scenario, "forgot-scheduler", None, "forgot"))
    scenario.pods.append("forgot-scheduler")
    plain = scenario.kube.create(_pod(scenario, "no-claims", None, None))
    assert plain["spec"]["schedulerName"] == "default-scheduler"  # no DRA: left alone
    scenario.kube.delete("Pod", "no-claims", scenario.namespace)
    scenario.wait_settled(timeout=120, expect_bound=1)
    pod = scenario.pod("forgot-scheduler")
    assert pod["spec"]["schedulerName"] == EXTENDER_SCHEDULER
    claim = scenario.kube.get("ResourceClaim", "forgot", scenario.namespace)
    assert len(allocated_devices(claim)) == 1
    assert pod["metadata"]["uid"] in {r["uid"] for r in claim["status"]["reservedFor"]}
    ref = f'pod="{scenario.namespace}/forgot-scheduler"'
    assert any(
        "Successfully bound pod" in line and ref in line
        for line in _log(plane, "kube-scheduler").splitlines()
    )
    assert ref not in _log(plane, "kube-scheduler-in-tree")
    assert f"pod {scenario.namespace}/forgot-scheduler: schedulerName set" in _log(plane, WEBHOOK_EXTENDER)

    # Validating only: an explicit default-scheduler with a claim is refused, naming both.
    scenario.kube.delete("MutatingWebhookConfiguration", registered.pop())
    _register(scenario, "Validating", webhook, registered, lambda answer: isinstance(answer, ApiError))
    with pytest.raises(ApiError) as refused:
        scenario.kube.create(_pod(scenario, "aimed-elsewhere", "default-scheduler", "explicit"))
    message = refused.value.body["message"]
    assert refused.value.status == 403, message
    assert 'denied the request: pod uses ResourceClaim "explicit" (spec.resourceClaims[0] "gpu")' in message
    assert 'spec.schedulerName is "default-scheduler"' in message
    assert f'set spec.schedulerName: "{EXTENDER_SCHEDULER}"' in message
    plain = scenario.kube.create(_pod(scenario, "no-claims-2", "default-scheduler", None))
    assert plain["spec"]["schedulerName"] == "default-scheduler"
    scenario.kube.delete("Pod", "no-claims-2", scenario.namespace)
    assert "allocation" not in scenario.kube.get("ResourceClaim", "explicit", scenario.namespace).get(
        "status", {}
    )


HELM_RELEASE = "webhook-e2e"


def _helm(plane: ControlPlane, *args: str) -> str:
    command = [
        str(chart.HELM),
        *args,
        "--namespace",
        HELM_RELEASE,
        "--kubeconfig",
        str(plane.admin_kubeconfig),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not chart.HELM.is_file(), reason=f"no {chart.HELM}: make helm-bin (needs go)")
def test_chart_webhook_is_accepted_and_keeps_its_certificate_across_upgrades(
    control_plane: ControlPlane,
) -> None:
    # A release of its own, its webhook inert here (an objectSelector no pod matches; nothing runs its pods).
    plane = control_plane
    kube = plane.client()
    scheduler = f"{HELM_RELEASE}-scheduler"
    values = [
        "--set",
        f"schedulerName={scheduler}",
        "--set",
        "webhook.enabled=true",
        "--set",
        "webhook.mode=both",
    ]
    values += ["--set", "webhook.objectSelector.matchLabels.e2e-no-pod-has-this=x"]
    _helm(plane, "install", HELM_RELEASE, str(chart.CHART), "--create-namespace", *values)
    try:

        def certificates() -> tuple[str, str, str]:
            secret = kube.get("Secret", f"{scheduler}-webhook-tls", HELM_RELEASE)
            mutating = kube.get("MutatingWebhookConfiguration", scheduler)
            validating = kube.get("ValidatingWebhookConfiguration", scheduler)
            bundles = {
                w["clientConfig"]["caBundle"] for w in (*mutating["webhooks"], *validating["webhooks"])
            }
            assert bundles == {secret["data"]["ca.crt"]}  # the API server trusts the CA of the served pair
            return secret["data"]["ca.crt"], secret["data"]["tls.crt"], secret["data"]["tls.key"]

        installed = certificates()
        _helm(
            plane,
            "upgrade",
            HELM_RELEASE,
            str(chart.CHART),
            "--reuse-values",
            "--set",
            "webhook.timeoutSeconds=7",
        )
        assert kube.get("MutatingWebhookConfiguration", scheduler)["webhooks"][0]["timeoutSeconds"] == 7
        assert certificates() == installed  # found by lookup and kept, not generated again
        _helm(plane, "uninstall", HELM_RELEASE, "--wait")
        with pytest.raises(ApiError) as gone:
            kube.get("MutatingWebhookConfiguration", scheduler)
        assert gone.value.status == 404
    finally:
        _helm(plane, "uninstall", HELM_RELEASE, "--ignore-not-found")
        kube.delete("Namespace", HELM_RELEASE)
        kube.close()
