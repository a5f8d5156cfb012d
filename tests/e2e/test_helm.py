"""The Helm chart installed on the e2e control plane with helm itself: the API server accepts every object
(the kube-system RoleBinding, the priority class, the restricted Pod Security level of the namespace:
the Deployment's pod is admitted), and upgrade, rollback and uninstall do what docs/install.md "Install
with Helm" says. A release of its own (another scheduler name and namespace), so the session's shipped
objects are untouched; nothing schedules its pods."""

from __future__ import annotations

import subprocess

import pytest

from e2e import chart
from e2e.controlplane import ControlPlane
from e2e.kube import ApiError, Kube

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not chart.HELM.is_file(), reason=f"no {chart.HELM}: make helm-bin (needs go)"),
]

RELEASE = NAMESPACE = "helm-e2e"
SCHEDULER = "helm-e2e-scheduler"


def _helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(chart.HELM), *args, "--namespace", NAMESPACE, "--kubeconfig", str(plane.admin_kubeconfig)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _extender_args(plane: ControlPlane) -> list[str]:
    kube = plane.client()
    deployment = kube.get("Deployment", SCHEDULER, NAMESPACE)
    kube.close()
    [extender] = deployment["spec"]["template"]["spec"]["initContainers"]
    return extender["args"]


def _gone(plane: ControlPlane, kind: str, name: str, namespace: str | None = None) -> bool:
    kube = plane.client()
    try:
        kube.get(kind, name, namespace)
    except ApiError as err:
        return err.status == 404
    finally:
        kube.close()
    return False


def test_helm_install_upgrade_rollback_uninstall(control_plane):
    plane = control_plane
    kube = plane.client()
    namespace = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.ensure(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": namespace}}
    )
    installed = _helm(plane, "install", RELEASE, str(chart.CHART), "--set", f"schedulerName={SCHEDULER}")
    try:
        assert "PodSecurity" not in installed.stderr, installed.stderr  # the API server's warning
        assert f"rollout status deployment/{SCHEDULER}" in installed.stdout  # NOTES
        # The Deployment's pod, created with dryRun (this kube-controller-manager runs no Deployment
        # controller): admission runs as for a real one, at the namespace's restricted level, and the
        # priority class resolves.
        template = kube.get("Deployment", SCHEDULER, NAMESPACE)["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "check"}}
        pod["spec"] = template["spec"]
        response = kube.http.post(Kube.path("Pod", NAMESPACE), json=pod, params={"dryRun": "All"})
        assert response.status_code == 201, response.text
        assert response.json()["spec"]["priority"] == 2_000_000_000  # system-cluster-critical
        reader = kube.get("RoleBinding", f"{SCHEDULER}-authentication-reader", "kube-system")
        assert reader["subjects"][0]["namespace"] == NAMESPACE
        assert "--log-format=json" not in _extender_args(plane)

        _helm(plane, "upgrade", RELEASE, str(chart.CHART), "--reuse-values", "--set", "logFormat=json")
        assert "--log-format=json" in _extender_args(plane)
        _helm(plane, "rollback", RELEASE, "1")
        assert "--log-format=json" not in _extender_args(plane)
        history = _helm(plane, "history", RELEASE).stdout
        assert "Rollback to 1" in history
    finally:
        _helm(plane, "uninstall", RELEASE)
        kube.close()
    for kind, name, ns in (
        ("Deployment", SCHEDULER, NAMESPACE),
        ("ClusterRole", RELEASE, None),
        ("RoleBinding", f"{SCHEDULER}-authentication-reader", "kube-system"),
    ):
        assert _gone(plane, kind, name, ns), f"{kind} {name} left after helm uninstall"
