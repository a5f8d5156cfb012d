"""charts/dra-extender: ``helm lint --strict`` passes, the chart renders with its defaults and with each
value of values.yaml set (a table: values -> the objects and fields they must give), every object
validates against the Kubernetes 1.37 schemas, values.schema.json refuses a wrong value, and manifests/
is the chart rendered (byte for byte for the generated files, object for object for the overlays).

helm is the build ``make helm-bin`` puts in .cache/ (from its Go module); without it the tests skip."""

from __future__ import annotations

import base64
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtensionOID

from allocator.features import FeatureGates, parse_feature_gates
from app.config.derivedconfig import parse_config
from e2e import chart
from tests.app.kube.test_manifests import OVERLAYS, ROOT, _extender, _one, _pod_spec
from tests.app.kube.test_manifests import render as kustomize

Docs = list[dict[str, Any]]

pytestmark = pytest.mark.skipif(
    not chart.HELM.is_file(), reason=f"no {chart.HELM}: `make test` builds it with go (make helm-bin)"
)

VALUES = yaml.safe_load((chart.CHART / "values.yaml").read_text())


def helm(*values: str, tmp_path: Path | None = None, overrides: dict[str, Any] | None = None) -> Docs:
    values_file = None
    if overrides is not None:
        assert tmp_path is not None
        values_file = tmp_path / "values.yaml"
        values_file.write_text(yaml.safe_dump(overrides))
    return [d for d in yaml.safe_load_all(chart.render(*values, values_file=values_file)) if d]


def _validate(docs: Docs) -> None:
    validate = pytest.importorskip("kubernetes_validate")
    for doc in docs:
        if doc["apiVersion"].startswith(("monitoring.coreos.com/", "cert-manager.io/")):
            continue  # a CRD: no schema in kubernetes-validate (test_manifests, _check_webhook_* check them)
        validate.validate(doc, "1.37", strict=True)


def _scheduler(docs: Docs) -> dict[str, Any]:
    return next(c for c in _pod_spec(docs)["containers"] if c["name"] == "kube-scheduler")


def _scheduler_config(docs: Docs, name: str = "dra-scheduler") -> dict[str, Any]:
    return yaml.safe_load(_one(docs, "ConfigMap", f"{name}-config")["data"]["config.yaml"])


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def test_chart_lints_strictly_and_carries_the_project_version():
    out = subprocess.run(
        [str(chart.HELM), "lint", "--strict", str(chart.CHART)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["appVersion"] == project["version"]
    assert meta["kubeVersion"] == ">=1.34.0-0"


def test_manifests_are_the_chart_rendered():
    stale = [
        str(path.relative_to(ROOT))
        for path, text in chart.generated().items()
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"run `make manifests`: {stale} differ from charts/dra-extender"


def test_defaults_render_the_base_objects_and_validate():
    docs = helm()
    _validate(docs)
    assert sorted({d["kind"] for d in docs}) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]  # no Namespace: `helm install --namespace N --create-namespace` or namespace.create
    base = kustomize(ROOT / "manifests")
    assert sorted(map(_key, docs)) == sorted(_key(d) for d in base if d["kind"] != "Namespace")


@pytest.mark.parametrize(
    ("overlay", "values"),
    [
        (
            "production",
            (
                *chart.BASE_VALUES,
                "logFormat=json",
                "monitoring.serviceMonitor.enabled=true",
                "monitoring.dashboard.enabled=true",
                "image.repository=registry.example.com/dra-extender",
            ),
        ),
        ("single-replica", (*chart.BASE_VALUES, "replicas=1", "podDisruptionBudget.enabled=false")),
    ],
)
def test_each_overlay_is_the_chart_with_values(overlay, values):
    # The overlays patch the rendered base; the chart gives the same objects from its values.
    patched = sorted(kustomize(OVERLAYS / overlay), key=_key)
    assert patched == sorted(helm(*values), key=_key)


def _check_image(docs: Docs) -> None:
    extender = _extender(docs)
    assert extender["image"] == "registry.example.com/dra-extender:1.2.3"
    assert extender["imagePullPolicy"] == "Always"
    assert _pod_spec(docs)["imagePullSecrets"] == [{"name": "registry"}]


def _check_default_tag(docs: Docs) -> None:
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert _extender(docs)["image"] == f"dra-extender:{meta['appVersion']}"


def _check_resources(docs: Docs) -> None:
    assert _extender(docs)["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}}
    assert _scheduler(docs)["resources"] == {"limits": {"memory": "3Gi"}, "requests": {"cpu": "1"}}


def _check_kube_scheduler(docs: Docs) -> None:
    scheduler = _scheduler(docs)
    assert scheduler["image"] == "mirror.example.com/kube-scheduler:v1.36.3"
    assert {"--v=4", "--feature-gates=DRAConsumableCapacity=true,DRADeviceTaints=false"} <= set(
        scheduler["command"]
    )
    config = _scheduler_config(docs)
    [profile] = config["profiles"]
    fit = next(c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit")
    assert fit["ignoredResources"] == ["example.com/gpu", "vendor.example/fpga"]
    assert config["extenders"][0]["weight"] == 5
    assert _checksum(docs) != _checksum(helm())  # the pods roll when the configuration changes


def _check_device_scoring(docs: Docs) -> None:
    [entry] = _scheduler_config(docs)["extenders"]
    assert entry["filterVerb"] == "filter" and entry["bindVerb"] == "bind"
    assert "prioritizeVerb" not in entry and "weight" not in entry  # kube-scheduler never asks prioritize
    assert "--device-scoring=filter" in _extender(docs)["args"]
    [shipped] = _scheduler_config(helm())["extenders"]
    assert shipped["prioritizeVerb"] == "prioritize" and shipped["weight"] == 2
    assert "--device-scoring=prioritize" in _extender(helm())["args"]


def _checksum(docs: Docs) -> str:
    return _one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def _check_extender_gates(docs: Docs) -> None:
    [flag] = [a for a in _extender(docs)["args"] if a.startswith("--feature-gates=")]
    gates = parse_feature_gates(flag.partition("=")[2])  # what the extender makes of it
    assert gates.DRAConsumableCapacity is True and gates.DRADeviceTaints is False
    assert gates != FeatureGates()


def _check_extender_config(docs: Docs) -> None:
    configmap = _one(docs, "ConfigMap", "dra-extender-config")
    parsed = parse_config(yaml.safe_load(configmap["data"]["config.yaml"]), Path("config.yaml"))
    assert parsed.settings["scheduling"] == {"device_selection": "first-fit", "scoring_policy": "spread"}
    assert [a.name for a in parsed.attributes] == ["example.com/numa"]
    extender = _extender(docs)
    assert "--config=/etc/dra-extender/config.yaml" in extender["args"]
    [mount] = extender["volumeMounts"]
    assert mount["mountPath"] == "/etc/dra-extender" and "subPath" not in mount  # so a change reaches it
    volume = next(v for v in _pod_spec(docs)["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]


def _check_binding_timeout(docs: Docs) -> None:
    # kube-scheduler must wait for a bind longer than the extender's binding-condition wait (900 s here)
    # plus the bind's own writes (40 s here), or it retries a bind that is still going to succeed.
    [extender] = _scheduler_config(docs)["extenders"]
    assert extender["httpTimeout"] == "950s"
    configmap = _one(docs, "ConfigMap", "dra-extender-config")
    parsed = parse_config(yaml.safe_load(configmap["data"]["config.yaml"]), Path("config.yaml"))
    assert parsed.settings["cluster"] == {"binding_timeout": 900, "bind_timeout_seconds": 40}


def _check_scheduler_name(docs: Docs) -> None:
    config = _scheduler_config(docs, "gpu-scheduler")
    assert [p["schedulerName"] for p in config["profiles"]] == ["gpu-scheduler"]
    election = config["leaderElection"]
    assert (election["resourceNamespace"], election["resourceName"]) == ("dra-extender", "gpu-scheduler")
    args = _extender(docs)["args"]
    assert {"--scheduler-name=gpu-scheduler", "--scheduler-lease=dra-extender/gpu-scheduler"} <= set(args)
    role = _one(docs, "Role", "gpu-scheduler-leader-election")
    assert ["gpu-scheduler"] in [r.get("resourceNames") for r in role["rules"]]
    labels = _one(docs, "Deployment", "gpu-scheduler")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        _one(docs, "Service")["spec"]["selector"],
        _one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        _one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        _pod_spec(docs)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "podAffinityTerm"
        ]["labelSelector"]["matchLabels"],
    ):
        assert selector == {"app.kubernetes.io/name": "gpu-scheduler"} and selector.items() <= labels.items()
    account = _one(docs, "ServiceAccount")["metadata"]["name"]
    assert account == _pod_spec(docs)["serviceAccountName"] == "gpu-scheduler"
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"][0]["name"] == "gpu-scheduler"


def _check_monitoring(docs: Docs) -> None:
    monitor = _one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    dashboard = _one(docs, "ConfigMap", "dra-extender-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (chart.CHART / "dashboards" / "dra-extender-dashboard.json").read_text()
    assert dashboard["data"]["dra-extender-dashboard.json"].strip() == shipped.strip()


def _check_no_network_policy(docs: Docs) -> None:
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def _check_network_policy_source(docs: Docs) -> None:
    [rule] = _one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]


def _check_pdb(docs: Docs) -> None:
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert _one(docs, "Deployment")["spec"]["replicas"] == 1


def _check_pdb_min_available(docs: Docs) -> None:
    assert _one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert _one(docs, "Deployment")["spec"]["replicas"] == 3


def _check_no_priority(docs: Docs) -> None:
    assert "priorityClassName" not in _pod_spec(docs)


def _check_placement(docs: Docs) -> None:
    spec = _pod_spec(docs)
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert spec["tolerations"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert spec["affinity"] == {"nodeAffinity": NODE_AFFINITY}


def _check_json_logs(docs: Docs) -> None:
    assert _extender(docs)["args"][-1] == "--log-format=json"


def _check_namespace(docs: Docs) -> None:
    namespace = _one(docs, "Namespace")
    assert namespace["metadata"]["name"] == "dra-extender"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _webhooks(docs: Docs) -> dict[str, dict[str, Any]]:
    """The chart's webhook configurations' one webhook each, by kind."""
    found = {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}
    for config in found.values():
        assert config["metadata"]["name"] == "dra-scheduler"
    return {kind: config["webhooks"][0] for kind, config in found.items()}


def _check_webhook_wiring(docs: Docs) -> None:
    """The extender serves the webhook with the Secret's pair, the Service and NetworkPolicy reach it."""
    extender = _extender(docs)
    assert {
        "--webhook-bind-address=0.0.0.0:9443",
        "--webhook-certfile=/etc/dra-extender-webhook/tls.crt",
        "--webhook-keyfile=/etc/dra-extender-webhook/tls.key",
    } <= set(extender["args"])
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in extender["ports"]
    [mount] = [m for m in extender["volumeMounts"] if m["name"] == "webhook-tls"]
    assert mount["mountPath"] == "/etc/dra-extender-webhook" and "subPath" not in mount
    [volume] = [v for v in _pod_spec(docs)["volumes"] if v["name"] == "webhook-tls"]
    assert volume["secret"]["secretName"] == "dra-scheduler-webhook-tls"
    service = _one(docs, "Service", "dra-scheduler-webhook")
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "dra-scheduler"}
    rules = _one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert {"ports": [{"port": 9443, "protocol": "TCP"}]} in rules
    for webhook in _webhooks(docs).values():
        assert webhook["clientConfig"]["service"]["name"] == "dra-scheduler-webhook"
        assert webhook["clientConfig"]["service"]["port"] == 443
        assert webhook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert webhook["sideEffects"] == "None" and webhook["admissionReviewVersions"] == ["v1"]
        # never the scheduler's own namespace nor kube-system, whatever the user selects
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["dra-extender", "kube-system"],
        } in webhook["namespaceSelector"]["matchExpressions"]


def _check_webhook(docs: Docs) -> None:
    _check_webhook_wiring(docs)
    webhooks = _webhooks(docs)
    assert list(webhooks) == ["MutatingWebhookConfiguration"]  # mode mutating by default
    [mutating] = webhooks.values()
    assert mutating["clientConfig"]["service"]["path"] == "/mutate"
    assert (mutating["failurePolicy"], mutating["timeoutSeconds"]) == ("Ignore", 5)
    assert "objectSelector" not in mutating
    # The generated certificate: signed by the caBundle the API server gets, for the Service's DNS names.
    secret = _one(docs, "Secret", "dra-scheduler-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_pem = base64.b64decode(mutating["clientConfig"]["caBundle"])
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca_pem
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert "dra-scheduler-webhook.dra-extender.svc" in names.get_values_for_type(x509.DNSName)
    key = serialization.load_pem_private_key(base64.b64decode(secret["data"]["tls.key"]), None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def _check_webhook_both(docs: Docs) -> None:
    _check_webhook_wiring(docs)
    webhooks = _webhooks(docs)
    assert sorted(webhooks) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert webhooks["ValidatingWebhookConfiguration"]["clientConfig"]["service"]["path"] == "/validate"
    for webhook in webhooks.values():
        assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Fail", 10)
        selector = webhook["namespaceSelector"]
        assert selector["matchLabels"] == {"dra.example.com/guardrail": "on"}
        assert selector["matchExpressions"][0] == {"key": "tier", "operator": "In", "values": ["gpu"]}
        assert webhook["objectSelector"] == {"matchLabels": {"app": "trainer"}}


def _check_webhook_cert_manager(docs: Docs) -> None:
    _check_webhook_wiring(docs)
    webhooks = _webhooks(docs)
    assert list(webhooks) == ["ValidatingWebhookConfiguration"]
    [validating] = webhooks.values()
    assert "caBundle" not in validating["clientConfig"]  # cert-manager's CA injector fills it
    config = _one(docs, "ValidatingWebhookConfiguration")
    annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    certificate = _one(docs, "Certificate")
    assert annotation == f"dra-extender/{certificate['metadata']['name']}"
    assert certificate["spec"]["secretName"] == "dra-scheduler-webhook-tls"
    assert "dra-scheduler-webhook.dra-extender.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer"}
    assert not [d for d in docs if d["kind"] in ("Issuer", "Secret")]


NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]
    }
}

OPTIONS: list[tuple[str, dict[str, Any], Callable[[Docs], None]]] = [
    (
        "image",
        {
            "image": {
                "repository": "registry.example.com/dra-extender",
                "tag": "1.2.3",
                "pullPolicy": "Always",
            },
            "imagePullSecrets": [{"name": "registry"}],
        },
        _check_image,
    ),
    ("image-default-tag", {"image": {"tag": ""}}, _check_default_tag),
    ("replicas", {"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}}, _check_pdb_min_available),
    (
        "resources",
        {
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": None},
            "kubeScheduler": {
                "resources": {"requests": {"cpu": "1", "memory": None}, "limits": {"memory": "3Gi"}}
            },
        },
        _check_resources,
    ),
    (
        "kube-scheduler",
        {
            "kubeScheduler": {
                "image": {"repository": "mirror.example.com/kube-scheduler", "tag": "v1.36.3"},
                "verbosity": 4,
                "featureGates": {"DRADeviceTaints": False, "DRAConsumableCapacity": True},
                "ignoredResources": ["example.com/gpu", "vendor.example/fpga"],
                "extenderWeight": 5,
            }
        },
        _check_kube_scheduler,
    ),
    ("device-scoring", {"kubeScheduler": {"deviceScoring": "filter"}}, _check_device_scoring),
    (
        "feature-gates",
        {"featureGates": {"DRAConsumableCapacity": True, "DRADeviceTaints": False}},
        _check_extender_gates,
    ),
    (
        "extender-config",
        {
            "extenderConfig": {
                "scheduling": {"deviceSelection": "first-fit", "scoringPolicy": "spread"},
                "derivedAttributes": [
                    {"name": "example.com/numa", "expression": "device.attributes['numa']"}
                ],
            }
        },
        _check_extender_config,
    ),
    (
        "binding-timeout",
        {"extenderConfig": {"cluster": {"bindingTimeoutSeconds": 900, "bindTimeoutSeconds": 40}}},
        _check_binding_timeout,
    ),
    ("scheduler-name", {"schedulerName": "gpu-scheduler"}, _check_scheduler_name),
    (
        "monitoring",
        {
            "monitoring": {
                "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
                "dashboard": {"enabled": True},
            }
        },
        _check_monitoring,
    ),
    ("network-policy-off", {"networkPolicy": {"enabled": False}}, _check_no_network_policy),
    (
        "network-policy-from",
        {"networkPolicy": {"metricsFrom": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]}},
        _check_network_policy_source,
    ),
    ("pdb-off", {"replicas": 1, "podDisruptionBudget": {"enabled": False}}, _check_pdb),
    ("priority-class-off", {"priorityClassName": ""}, _check_no_priority),
    (
        "placement",
        {
            "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": NODE_AFFINITY},
        },
        _check_placement,
    ),
    ("json-logs", {"logFormat": "json"}, _check_json_logs),
    ("namespace", {"namespace": {"create": True}}, _check_namespace),
    ("webhook", {"webhook": {"enabled": True}}, _check_webhook),
    (
        "webhook-both",
        {
            "webhook": {
                "enabled": True,
                "mode": "both",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "namespaceSelector": {
                    "matchLabels": {"dra.example.com/guardrail": "on"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
                },
                "objectSelector": {"matchLabels": {"app": "trainer"}},
            }
        },
        _check_webhook_both,
    ),
    (
        "webhook-cert-manager",
        {
            "webhook": {
                "enabled": True,
                "mode": "validating",
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer"},
                },
            }
        },
        _check_webhook_cert_manager,
    ),
]


@pytest.mark.parametrize(("overrides", "check"), [o[1:] for o in OPTIONS], ids=[o[0] for o in OPTIONS])
def test_each_value_renders_what_it_says_and_validates(overrides, check, tmp_path):
    docs = helm(tmp_path=tmp_path, overrides=overrides)
    _validate(docs)
    check(docs)
    lint = [str(chart.HELM), "lint", "--strict", str(chart.CHART), "--values", str(tmp_path / "values.yaml")]
    out = subprocess.run(lint, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_value_is_in_the_table():
    covered = {key for _, overrides, _ in OPTIONS for key in overrides}
    assert covered == set(VALUES), "a value of values.yaml without a row in OPTIONS"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"replicas": "two"}, "at '/replicas': got string, want integer"),
        ({"replica": 2}, "additional properties 'replica' not allowed"),
        ({"logFormat": "xml"}, "/logFormat"),
        ({"featureGates": {"DRADeviceTaints": "yes"}}, "/featureGates/DRADeviceTaints"),
        ({"image": {"repo": "x"}}, "additional properties 'repo' not allowed"),
        ({"extenderConfig": {"sheduling": {}}}, "additional properties 'sheduling' not allowed"),
        ({"schedulerName": "GPU_scheduler"}, "/schedulerName"),
        ({"webhook": {"mode": "mutate"}}, "/webhook/mode"),
        ({"kubeScheduler": {"deviceScoring": "score"}}, "/kubeScheduler/deviceScoring"),
        ({"webhook": {"failurePolicy": "ignore"}}, "/webhook/failurePolicy"),
        ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
        ({"podDisruptionBudget": {"minAvailable": -1}}, "minAvailable': minimum: got -1"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "'half' does not match pattern"),
        ({"webhook": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}, "missing property 'name'"),
        (
            {"extenderConfig": {"cluster": {"bindingTimeoutSeconds": "10m"}}},
            "bindingTimeoutSeconds': got string",
        ),
        (
            {"extenderConfig": {"cluster": {"bindTimeoutSeconds": 0}}},
            "/extenderConfig/cluster/bindTimeoutSeconds",
        ),
    ],
)
def test_schema_refuses_a_wrong_value(overrides, message, tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        helm(tmp_path=tmp_path, overrides=overrides)
    assert message in failed.value.stderr


def test_kube_version_below_1_34_is_refused():
    command = [str(chart.HELM), "template", "x", str(chart.CHART), "--kube-version", "1.33.4"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "kubeVersion" in out.stderr


def test_notes_say_how_to_check_the_install():
    command = [str(chart.HELM), "install", "dra-extender", str(chart.CHART), "--namespace", "gpu"]
    command += ["--dry-run=client", "--set", "schedulerName=gpu-scheduler"]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout
    notes = out.partition("NOTES:")[2]
    assert "kubectl -n gpu rollout status deployment/gpu-scheduler" in notes
    assert "/readyz" in notes and "/metrics" in notes
    assert "schedulerName: gpu-scheduler" in notes


@pytest.mark.parametrize(
    ("mode", "says"), [("mutating", 'gets\n   schedulerName "dra-scheduler"'), ("validating", "is refused")]
)
def test_notes_say_how_to_check_the_webhook(mode, says):
    command = [
        str(chart.HELM),
        "install",
        "dra-extender",
        str(chart.CHART),
        "--namespace",
        "gpu",
        "--dry-run=client",
    ]
    plain = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout
    command += ["--set", "webhook.enabled=true", "--set", f"webhook.mode={mode}"]
    notes = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout.partition(
        "NOTES:"
    )[2]
    assert "admission webhook" not in plain.partition("NOTES:")[2]
    assert (
        f"admission webhook ({mode}, failurePolicy Ignore" in notes and "(never gpu or kube-system)" in notes
    )
    assert says in notes and "dra_extender_admission_reviews_total" in notes


def test_configuration_reference_shows_the_charts_kube_scheduler_configuration():
    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page.partition("## kube-scheduler configuration")[2]
    shown = yaml.safe_load(section.partition("```yaml\n")[2].partition("```")[0])
    rendered = _scheduler_config(helm())
    assert shown["extenders"] == rendered["extenders"]
    assert shown["percentageOfNodesToScore"] == rendered["percentageOfNodesToScore"]
    [shown_profile], [rendered_profile] = shown["profiles"], rendered["profiles"]
    assert shown_profile["schedulerName"] == rendered_profile["schedulerName"]
    assert shown_profile["plugins"] == rendered_profile["plugins"]


def test_install_guide_documents_every_value_and_make_manifests():
    guide = (ROOT / "docs" / "install.md").read_text()
    section = guide.partition("## Install with Helm")[2].partition("\n## ")[0]
    table = {cell for row in section.splitlines() if row.startswith("| `") for cell in row.split("`")[1::2]}
    documented = {name.partition(".")[0] for name in table}
    assert set(VALUES) <= documented, set(VALUES) - documented
    assert "make manifests" in section and "helm rollback" in section and "helm uninstall" in section
