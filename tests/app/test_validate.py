"""``dra-extender validate``: exit 1 with every problem listed, 0 only when clean; the same problems are
warnings for ``simulate`` and, with ``--strict``, an exit 2 naming the first. A config file naming files
that cannot be used is a problem naming the field, and ``serve`` refuses it naming the field too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli.main import main
from app.http import server as httpserver
from tests.builders import claim, claim_template, device, device_class, node, pod, request, resource_slice
from tests.ports import free_ports

DRIVER = "gpu.example.com"
NS = "ml"
Obj = dict[str, Any]


def _clean() -> list[Obj]:
    return [
        node("n1"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")]),
        claim(NS, "pair", [request("gpus", "gpu", 2)]),
        claim_template(NS, "one", [request("gpu", "gpu")]),
        pod(NS, "p", ["pair"], templates={"single": "one"}),
    ]


def _typo_field(objects: list[Obj], _: Path) -> str:
    exactly = objects[3]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["cuont"] = exactly.pop("count")
    return "cluster.yaml: ResourceClaim ml/pair: spec.devices.requests[0].exactly.cuont: unknown field"


def _typo_kind(objects: list[Obj], _: Path) -> str:
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClame", "metadata": {"name": "x"}})
    return (
        'cluster.yaml: ResourceClame x: no matches for kind "ResourceClame" in version "resource.k8s.io/v1" '
        "(did you mean ResourceClaim?)"
    )


def _missing_claim(objects: list[Obj], _: Path) -> str:
    objects.append(pod(NS, "q", ["nowhere"]))
    return (
        "cluster.yaml: Pod ml/q: spec.resourceClaims[0].resourceClaimName: ResourceClaim ml/nowhere not found"
    )


def _missing_template(objects: list[Obj], _: Path) -> str:
    objects.append(pod(NS, "r", templates={"gpu": "nowhere"}))
    return (
        "cluster.yaml: Pod ml/r: spec.resourceClaims[0].resourceClaimTemplateName: "
        "ResourceClaimTemplate ml/nowhere not found"
    )


def _class_cel(objects: list[Obj], _: Path) -> str:
    objects[1]["spec"]["selectors"].append({"cel": {"expression": "device.driver =="}})
    return "cluster.yaml: DeviceClass gpu: spec.selectors[1].cel.expression: "


def _template_cel(objects: list[Obj], _: Path) -> str:
    exactly = objects[4]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["selectors"] = [{"cel": {"expression": "device.attributes["}}]
    return "cluster.yaml: ResourceClaimTemplate ml/one: spec.spec.devices.requests[0].exactly.selectors[0]"


def _claim_cel(objects: list[Obj], _: Path) -> str:
    bad = {"name": "bad", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": "device."}}]}
    either = {"name": "either", "firstAvailable": [{"name": "any", "deviceClassName": "gpu"}, bad]}
    objects[3]["spec"]["devices"]["requests"].append(either)
    return "cluster.yaml: ResourceClaim ml/pair: spec.devices.requests[1].firstAvailable[1].selectors[0]"


def _dangling_link(_: list[Obj], state: Path) -> str:
    (state / "gpus.yaml").symlink_to(state / "moved.yaml")
    return f"gpus.yaml: skipped (a symbolic link to {state / 'moved.yaml'}: No such file or directory)"


PROBLEMS: dict[str, Callable[[list[Obj], Path], str]] = {
    "unknown field": _typo_field,
    "unknown kind": _typo_kind,
    "pod claim without its ResourceClaim": _missing_claim,
    "pod claim without its ResourceClaimTemplate": _missing_template,
    "DeviceClass CEL that does not compile": _class_cel,
    "ResourceClaimTemplate CEL that does not compile": _template_cel,
    "ResourceClaim CEL that does not compile": _claim_cel,
    "a manifest link to a file that does not exist": _dangling_link,
}


def _state(tmp_path: Path, problem: Callable[[list[Obj], Path], str] | None = None) -> tuple[Path, str]:
    """A state directory, with ``problem`` made in it; the problem's line (relative to the directory)."""
    state = tmp_path / "state"
    state.mkdir()
    objects = _clean()
    line = problem(objects, state) if problem else ""
    (state / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    return state, line


def problems(out: str) -> tuple[str, list[str]]:
    """validate's header line and its problems (a problem's further lines are indented further)."""
    header, *lines = out.splitlines()
    return header, [line for line in lines if not line.startswith("   ")]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_clean_state_is_valid(capsys, tmp_path):
    state, _ = _state(tmp_path)
    code, out, err = run(capsys, "validate", "--state", str(state))
    assert (code, err) == (0, "")
    # The template claim is generated: two claims, and its pod is pending.
    assert out == f"{state}: valid (1 nodes, 1 ResourceSlices, 2 devices, 2 ResourceClaims, 1 pending pods)\n"


@pytest.mark.parametrize("kind", PROBLEMS)
def test_each_problem_fails_validate_warns_simulate_and_stops_simulate_strict(capsys, tmp_path, kind):
    state, line = _state(tmp_path, PROBLEMS[kind])
    code, out, err = run(capsys, "validate", "--state", str(state))
    assert (code, err) == (1, "")
    header, listed = problems(out)
    assert header.startswith(f"{state}: 1 problem (")
    [problem] = listed
    assert problem.startswith(f"  {state}/{line}")
    # The same line is a warning elsewhere, and with --strict the command's error.
    code, _, err = run(capsys, "simulate", "--state", str(state))
    assert code == 0
    assert f"dra-extender: warning: {problem.strip()}" in err
    code, out, err = run(capsys, "simulate", "--strict", "--state", str(state))
    assert (code, out) == (2, "")
    assert err.startswith(f"dra-extender: {state}/{line}")


def test_a_finished_pod_whose_claim_is_gone_is_no_problem(capsys, tmp_path):
    def finished(objects: list[Obj], _: Path) -> str:
        done = pod(NS, "done", ["deleted-after-it-finished"])
        done["status"] = {"phase": "Succeeded"}
        objects.append(done)
        return ""

    state, _ = _state(tmp_path, finished)
    code, out, _ = run(capsys, "validate", "--state", str(state))
    assert code == 0, out


def test_validate_lists_every_problem_in_one_run(capsys, tmp_path):
    def every(objects: list[Obj], state: Path) -> str:
        return "\n".join(make(objects, state) for make in PROBLEMS.values())

    state, lines = _state(tmp_path, every)
    code, out, _ = run(capsys, "validate", "--strict", "--state", str(state))  # --strict: listed all the same
    assert code == 1
    header, listed = problems(out)
    assert header.startswith(f"{state}: {len(PROBLEMS)} problems (")
    assert len(listed) == len(PROBLEMS)
    for line in lines.splitlines():
        assert sum(problem.startswith(f"  {state}/{line}") for problem in listed) == 1, line


def test_an_empty_state_directory_is_a_problem(capsys, tmp_path):
    code, out, _ = run(capsys, "validate", "--state", str(tmp_path))
    assert code == 1
    assert out == (
        f"{tmp_path}: 1 problem (0 nodes, 0 ResourceSlices, 0 devices, 0 ResourceClaims, 0 pending pods):\n"
        "  no manifest files, no Node, Pod or DRA object (resource.k8s.io): is this the state "
        "directory?\n"
    )


def _config(tmp_path: Path, fields: dict[str, dict[str, str]]) -> Path:
    path = tmp_path / "extender.yaml"
    document = {"apiVersion": "dra-extender.io/v1alpha1", "kind": "ExtenderConfiguration", **fields}
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("server", "sslCertFile"),
        ("server", "sslKeyFile"),
        ("server", "sslCACerts"),
        ("cluster", "kubeconfig"),
    ],
)
def test_validate_config_naming_a_missing_file_exits_1_naming_the_field(capsys, tmp_path, section, field):
    from tests.app.test_cli import tls_files

    cert, key, _, _ = tls_files(tmp_path)
    missing = tmp_path / "missing"
    fields = {"server": {"sslCertFile": str(cert), "sslKeyFile": str(key)}}
    fields.setdefault(section, {})[field] = str(missing)
    config = _config(tmp_path, fields)
    code, out, err = run(capsys, "validate", "--config", str(config))
    assert (code, err) == (1, "")
    assert out == (
        f"{config}: 1 problem (0 derived attributes):\n"
        f"  {section}.{field}: {missing}: cannot read it: No such file or directory\n"
    )


def test_validate_config_lists_every_unusable_file(capsys, tmp_path):
    (tmp_path / "a-directory").mkdir()
    fields = {
        "server": {"sslCertFile": str(tmp_path / "a-directory"), "sslKeyFile": str(tmp_path / "k.pem")},
        "cluster": {"kubeconfig": str(tmp_path / "kubeconfig")},
    }
    config = _config(tmp_path, fields)
    code, out, _ = run(capsys, "validate", "--config", str(config))
    assert code == 1
    assert out.splitlines()[1:] == [
        f"  server.sslCertFile: {tmp_path / 'a-directory'}: not a regular file",
        f"  server.sslKeyFile: {tmp_path / 'k.pem'}: cannot read it: No such file or directory",
        f"  cluster.kubeconfig: {tmp_path / 'kubeconfig'}: cannot read it: No such file or directory",
    ]


def test_serve_refuses_a_missing_file_of_the_config_naming_the_field_unless_a_flag_overrides_it(
    capsys, monkeypatch, tmp_path
):
    from tests.app.test_cli import tls_files

    served: list[object] = []
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: served.append(args))
    state, _ = _state(tmp_path)
    cert, key, _, _ = tls_files(tmp_path)
    config = _config(
        tmp_path, {"server": {"sslCertFile": str(tmp_path / "gone.pem"), "sslKeyFile": str(key)}}
    )
    port = str(free_ports(1)[0])
    code, _, err = run(capsys, "serve", "--config", str(config), "--state", str(state), "--port", port)
    assert code == 2 and served == []
    assert err == (
        f"dra-extender: {config}: server.sslCertFile: {tmp_path / 'gone.pem'}: cannot read it: "
        "No such file or directory\n"
    )
    # The flag given on the command line is the file used: the field's file is not looked at.
    argv = ["serve", "--config", str(config), "--state", str(state), "--ssl-certfile", str(cert)]
    code, _, err = run(capsys, *argv, "--port", port)
    assert code == 0, err
    assert len(served) == 1


def test_validate_config_loads_the_tls_files_as_serve_does_naming_the_field(capsys, tmp_path):
    from tests.app.test_cli import tls_files

    cert, key, ca, other_key = tls_files(tmp_path)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("apiVersion: v1\n")
    fields = {"sslCertFile": str(cert), "sslKeyFile": str(other_key), "sslCACerts": str(not_pem)}
    config = _config(tmp_path, {"server": fields})
    code, out, _ = run(capsys, "validate", "--config", str(config))
    assert code == 1
    key_problem, ca_problem = out.splitlines()[1:]
    assert key_problem.startswith(
        f"  server.sslKeyFile: {other_key}: not a PEM private key of the certificate {cert} ("
    )
    assert ca_problem.startswith(f"  server.sslCACerts: {not_pem}: no PEM certificate in it (")
    fields["sslCACerts"] = str(ca)
    code, out, _ = run(capsys, "validate", "--config", str(_config(tmp_path, {"server": fields})))
    assert (code, out.splitlines()[1:]) == (1, [key_problem])
    fields["sslKeyFile"] = str(key)
    code, out, _ = run(capsys, "validate", "--config", str(_config(tmp_path, {"server": fields})))
    assert (code, out) == (0, f"{config}: valid (0 derived attributes)\n")


def test_serve_names_the_kubeconfig_field_or_flag_whichever_gave_the_missing_file(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    missing = tmp_path / "kubeconfig"
    config = _config(tmp_path, {"cluster": {"kubeconfig": str(missing)}})
    code, _, err = run(capsys, "serve", "--config", str(config))
    assert code == 2
    problem = "cannot read it: No such file or directory"
    assert err == f"dra-extender: {config}: cluster.kubeconfig: {missing}: {problem}\n"
    code, _, err = run(capsys, "serve", "--kubeconfig", str(missing))
    assert code == 2
    assert err == f"dra-extender: --kubeconfig {missing}: {problem}\n"


def test_validate_config_lists_the_tls_files_problems_beside_a_missing_kubeconfig(capsys, tmp_path):
    """One run lists every problem: a kubeconfig that is not there does not hide a key that is not the
    certificate's, nor a CA file without certificates."""
    from tests.app.test_cli import tls_files

    cert, _, _, other_key = tls_files(tmp_path)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("apiVersion: v1\n")
    missing = tmp_path / "kubeconfig"
    fields = {
        "server": {"sslCertFile": str(cert), "sslKeyFile": str(other_key), "sslCACerts": str(not_pem)},
        "cluster": {"kubeconfig": str(missing)},
    }
    code, out, _ = run(capsys, "validate", "--config", str(_config(tmp_path, fields)))
    assert code == 1
    key_problem, ca_problem, kubeconfig_problem = out.splitlines()[1:]
    assert key_problem.startswith(
        f"  server.sslKeyFile: {other_key}: not a PEM private key of the certificate"
    )
    assert ca_problem.startswith(f"  server.sslCACerts: {not_pem}: no PEM certificate in it (")
    assert kubeconfig_problem == f"  cluster.kubeconfig: {missing}: cannot read it: No such file or directory"
