"""manifests/ and the Dockerfile: the kustomization and its overlays render (kustomize built by ``make`` into
.cache/, else ``kubectl kustomize``), every object validates against the Kubernetes schemas
(kubernetes-validate, where installed), and the invariants that make the deployment work hold: the
KubeSchedulerConfiguration avoids the extender gotchas (extender-protocol.md §6), RBAC is least privilege,
pods run restricted, the sidecar gates kube-scheduler on readiness, metrics are reachable only on their
port, and the README and docs/ say what the manifests do."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests" / "base"
OVERLAYS = ROOT / "manifests" / "overlays"


def _kustomize() -> list[str]:
    built = sorted((ROOT / ".cache").glob("kustomize-v*/kustomize"))
    if built:
        return [str(built[-1]), "build"]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kustomize: `make test` builds it with go; else install kubectl")
    return [kubectl, "kustomize"]


def render(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [*_kustomize(), str(directory)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(ROOT / "manifests")


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    [configmap] = [d for d in yaml.safe_load_all((MANIFESTS / "kube-scheduler-config.yaml").read_text()) if d]
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"].startswith(name))
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return _one(docs, "Deployment")["spec"]["template"]["spec"]


def _extender(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in _pod_spec(docs)["initContainers"] if c["name"] == "dra-extender")


def test_every_object_validates_against_the_kubernetes_schemas(rendered):
    validate = pytest.importorskip("kubernetes_validate")
    kinds = sorted({d["kind"] for d in rendered})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    for doc in rendered:
        validate.validate(doc, "1.37", strict=True)
    assert render(ROOT / "manifests") == render(MANIFESTS)  # `kubectl apply -k manifests/` is the base


@pytest.mark.parametrize("overlay", sorted(p.name for p in OVERLAYS.iterdir()))
def test_every_overlay_renders_and_validates(overlay):
    validate = pytest.importorskip("kubernetes_validate")
    for doc in render(OVERLAYS / overlay):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: no schema in kubernetes-validate (its fields are checked below)
        validate.validate(doc, "1.37", strict=True)


def test_production_overlay_has_json_logs_monitoring_and_the_registry_image(rendered):
    docs = render(OVERLAYS / "production")
    extender = _extender(docs)
    assert "--log-format=json" in extender["args"] and "--log-format=json" not in _extender(rendered)["args"]
    assert extender["image"] == "registry.example.com/dra-extender:0.1.0"
    monitor = _one(docs, "ServiceMonitor")
    service = _one(docs, "Service", "dra-scheduler-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    [endpoint] = monitor["spec"]["endpoints"]
    assert (
        endpoint["port"] in [p["name"] for p in service["spec"]["ports"]] and endpoint["path"] == "/metrics"
    )
    dashboard = _one(docs, "ConfigMap", "dra-extender-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dra-extender-dashboard.json"])["uid"] == "dra-extender"


def test_single_replica_overlay_drops_the_disruption_budget():
    docs = render(OVERLAYS / "single-replica")
    assert _one(docs, "Deployment")["spec"]["replicas"] == 1
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_metrics_port_is_served_listed_and_the_only_way_in(rendered):
    extender = _extender(rendered)
    [address] = [a.split("=", 1)[1] for a in extender["args"] if a.startswith("--metrics-bind-address=")]
    port = int(address.rpartition(":")[2])
    [probes] = [a.split("=", 1)[1] for a in extender["args"] if a.startswith("--health-probe-bind-address=")]
    ports = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert ports == {"metrics": port, "probes": int(probes.rpartition(":")[2])}
    service = _one(rendered, "Service", "dra-scheduler-metrics")
    assert service["spec"]["clusterIP"] == "None"  # every replica is scraped
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    labels = _one(rendered, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    policy = _one(rendered, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {port, 10259}  # no rule reaches the loopback-only 8888
    assert _pod_spec(rendered)["priorityClassName"] == "system-cluster-critical"


def test_the_docs_say_what_the_manifests_ship(scheduler_config):
    readme = (ROOT / "README.md").read_text()
    docs = ROOT / "docs"
    (extender,) = scheduler_config["extenders"]
    # The recommended weight is the shipped one, in the documented configuration and its prose.
    configuration = (docs / "configuration.md").read_text()
    assert re.search(rf"^  weight: {extender['weight']}\b", configuration, re.MULTILINE)
    assert f"**`weight: {extender['weight']}`** is recommended" in (docs / "features.md").read_text()
    timeout = extender["httpTimeout"].removesuffix("s")
    assert f"`manifests/` ships {timeout} s" in (docs / "operations.md").read_text()
    values = yaml.safe_load((ROOT / "charts" / "dra-extender" / "values.yaml").read_text())
    tag = values["kubeScheduler"]["image"]["tag"]
    assert f"| kube-scheduler | {tag.removeprefix('v')} |" in readme  # the supported-versions table


def test_scheduler_configuration_avoids_the_extender_gotchas(scheduler_config, rendered):
    config = scheduler_config
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["percentageOfNodesToScore"] == 100
    for profile in config["profiles"]:
        disabled = [p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]]
        assert "DynamicResources" in disabled
        fit = next(c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit")
        assert "deviceclass.resource.kubernetes.io" in fit["ignoredResourceGroups"]
        assert fit["ignoredResources"]
    (extender,) = config["extenders"]
    verbs = ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")
    assert tuple(extender[v] for v in verbs) == ("filter", "prioritize", "bind", "preempt")
    assert extender["weight"] > 0
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert not extender.get("managedResources")
    assert "managedResources stays empty" in (MANIFESTS / "kube-scheduler-config.yaml").read_text()
    timeout = int(re.fullmatch(r"(\d+)s", extender["httpTimeout"]).group(1))
    from app.config.settings import ClusterSettings

    defaults = ClusterSettings()
    # The extender decides a bind's outcome, also one that waits for binding conditions.
    assert timeout > defaults.bind_timeout_seconds + defaults.binding_timeout_seconds
    if extender["urlPrefix"].startswith("https://"):
        assert extender["enableHTTPS"] and extender["tlsConfig"]["caFile"]  # else no verification at all
    # The URL points at the sidecar, and the extender watches the scheduler's own Lease.
    args = _extender(rendered)["args"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888/scheduler"
    assert {"--host=127.0.0.1", "--port=8888", "--in-cluster"} <= set(args)
    election = config["leaderElection"]
    assert f"--scheduler-lease={election['resourceNamespace']}/{election['resourceName']}" in args
    # The mounted ConfigMap carries this file.
    configmap = _one(rendered, "ConfigMap", "dra-scheduler-config")
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == config


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


def test_rbac_is_least_privilege(rendered):
    for doc in rendered:
        for rule in doc.get("rules") or ():
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], doc["metadata"]["name"]
    assert _rules(_one(rendered, "ClusterRole", "dra-extender")) == {
        ("", "namespaces"): {"get", "list", "watch"},
        ("", "nodes"): {"get", "list", "watch"},
        ("", "pods"): {"get", "list", "watch", "patch"},  # patch: the requeue annotation
        ("", "pods/binding"): {"create"},
        ("scheduling.k8s.io", "podgroups"): {"get", "list", "watch"},
        ("", "pods/status"): {"patch"},
        # the extender's own preemption (app.kube.preemptor): evict, read the budgets it honours
        ("", "pods/eviction"): {"create"},
        ("policy", "poddisruptionbudgets"): {"list"},
        ("resource.k8s.io", "resourceslices"): {"get", "list", "watch"},
        ("resource.k8s.io", "deviceclasses"): {"get", "list", "watch"},
        ("resource.k8s.io", "resourceclaimtemplates"): {"get", "list", "watch"},
        ("resource.k8s.io", "devicetaintrules"): {"get", "list", "watch"},
        ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch", "update", "create", "delete"},
        ("resource.k8s.io", "resourceclaims/status"): {"update"},
        # checked by the API server before any change of status.allocation / status.reservedFor
        # (DRAResourceClaimGranularStatusAuthorization, on since 1.36)
        ("resource.k8s.io", "resourceclaims/binding"): {"update"},
        # Events on pods (app.kube.events): create, and patch for a repeat's series.count
        ("events.k8s.io", "events"): {"create", "patch"},
    }
    lease = _one(rendered, "Role", "dra-scheduler-leader-election")
    assert {r["resources"][0]: set(r["verbs"]) for r in lease["rules"] if r.get("resourceNames")} == {
        "leases": {"get", "update"}
    }
    service_account = _one(rendered, "ServiceAccount")
    for binding in (d for d in rendered if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": service_account["metadata"]["name"],
                "namespace": "dra-extender",
            }
        ]
    reader = _one(rendered, "RoleBinding", "dra-scheduler-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"


def test_pods_run_restricted_with_probes_and_the_sidecar_gates_the_scheduler(rendered):
    spec = _pod_spec(rendered)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    containers = [*spec["initContainers"], *spec["containers"]]
    for container in containers:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert container["livenessProbe"] and container["readinessProbe"]
        image = container["image"]
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), image
        assert container["resources"]["requests"]
    extender = _extender(rendered)
    assert (
        extender["restartPolicy"] == "Always"
    )  # native sidecar: kube-scheduler starts after its startupProbe
    # The kubelet probes the probe listener (app.http.probes), by its port name.
    probes = (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez"))
    for probe, path in probes:
        assert extender[probe]["httpGet"] == {"path": path, "port": "probes"}
    deployment = _one(rendered, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    pdb = _one(rendered, "PodDisruptionBudget")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == _one(rendered, "ConfigMap")["metadata"]["name"]


def test_dockerfile_is_multi_stage_non_root_and_pinned():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(stages) >= 2
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.MULTILINE).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    tag = base.partition("@")[0]
    assert f"# Tag: {tag}." in text  # the digest says nothing to a reader: the tag beside it does
    assert "--require-hashes" in text
    user = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert re.search(r'^ENTRYPOINT \["dra-extender"\]', text, re.MULTILINE)


def test_runtime_lock_pins_every_package_with_hashes():
    lock = (ROOT / "requirements-runtime.lock").read_text()
    pins = re.findall(r"^([a-z0-9][a-z0-9._-]*)==\S+ \\$", lock, re.MULTILINE | re.IGNORECASE)
    blocks = re.split(r"^(?=[a-z0-9][a-z0-9._-]*==)", lock, flags=re.MULTILINE | re.IGNORECASE)[1:]
    assert len(pins) == len(blocks) > 20
    assert all("--hash=sha256:" in block for block in blocks)
    assert {"fastapi", "prometheus-client", "uvicorn"} <= {p.lower() for p in pins}


def test_license_is_the_apache_2_0_text():
    import hashlib

    # sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, as pyproject's license = "Apache-2.0".
    digest = hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest()
    assert digest == "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _shipped_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """The extender sidecar and the kube-scheduler container of ``deployment.yaml`` as shipped."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "deployment.yaml").read_text()) if d]
    spec = _pod_spec(docs)
    extender = next(c for c in spec["initContainers"] if c["name"] == "dra-extender")
    return extender, next(c for c in spec["containers"] if c["name"] == "kube-scheduler")


def test_kube_scheduler_gives_up_the_lease_when_its_extender_cannot_answer(scheduler_config):
    # Issue 33: kube-scheduler's liveness probe asks the extender's probe listener whether the extender is
    # ready, so the kubelet restarts kube-scheduler, which releases the Lease, while the extender is down.
    extender, scheduler = _shipped_pod()
    address = next(a for a in extender["args"] if a.startswith("--health-probe-bind-address="))
    liveness = scheduler["livenessProbe"]
    assert liveness["httpGet"] == {"path": "/readyz", "port": int(address.rpartition(":")[2])}
    # Detected within periodSeconds x failureThreshold; the standby then takes the released Lease within
    # 2.2 x retryPeriod (client-go's jitter). Twice that (the restarted kube-scheduler may take the Lease
    # back once before the kubelet's restart back-off keeps it down) stays within the 15 s allowed.
    election = scheduler_config["leaderElection"]
    assert election["leaderElect"] is True
    retry = float(election["retryPeriod"].removesuffix("s"))
    assert 2 * liveness["periodSeconds"] * liveness["failureThreshold"] + 2.2 * retry <= 15


KUBE_SCHEDULER_DEPRECATED_FLAGS = {
    "--profiling",
    "--contention-profiling",
    "--kubeconfig",
    "--kube-api-content-type",
    "--kube-api-qps",
    "--kube-api-burst",
    "--pod-max-in-unschedulable-pods-duration",
}
"""kube-scheduler v1.37.2's deprecated flags (cmd/kube-scheduler/app/options/deprecated.go)."""


def test_kube_scheduler_runs_without_deprecated_flags():
    _, scheduler = _shipped_pod()
    flags = {arg.partition("=")[0] for arg in scheduler["command"][1:]}
    # The one left has no replacement in 1.37; the manifest says why it is there.
    assert flags & KUBE_SCHEDULER_DEPRECATED_FLAGS <= {"--pod-max-in-unschedulable-pods-duration"}
