"""The command line with unusable or doubtful input: --version, a port in use, output formats, unknown
node names, wrong or empty state directories, unknown fields, DeviceClass CEL that does not compile."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli.main import main
from app.http import server as httpserver
from app.state.knownfields import SCHEMA_FILE, generate, render, unknown_fields
from tests.builders import claim, device, device_class, node, pod, request, resource_slice, write_state

DRIVER = "gpu.example.com"
NS = "ml"


def _objects() -> list[dict[str, Any]]:
    return [
        node("n1"),
        node("n2"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")]),
        claim(NS, "pair", [request("gpus", "gpu", 2)]),
        pod(NS, "p", ["pair"]),
    ]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return write_state(tmp_path, _objects())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_names_the_package_python_the_kubernetes_api_and_the_commit(capsys, monkeypatch):
    import platform

    from app.config import buildinfo

    monkeypatch.setenv("DRA_EXTENDER_GIT_COMMIT", "0123abc")
    buildinfo.git_commit.cache_clear()
    code, out, _ = run(capsys, "--version")
    buildinfo.git_commit.cache_clear()
    assert code == 0
    assert out.splitlines() == [
        "dra-extender 0.1.0",  # pyproject.toml [project] version
        f"Python {platform.python_version()}",
        "Kubernetes API: resource.k8s.io/v1 (Kubernetes 1.37); also reads resource.k8s.io/v1beta2, "
        "resource.k8s.io/v1beta1, resource.k8s.io/v1alpha3",
        "git commit: 0123abc",
    ]


def test_the_commit_comes_from_the_checkout_without_the_build_variable(monkeypatch):
    import subprocess

    from app.config import buildinfo

    monkeypatch.delenv("DRA_EXTENDER_GIT_COMMIT", raising=False)
    buildinfo.git_commit.cache_clear()
    try:
        head = subprocess.run(
            ["git", "-C", str(Path(buildinfo.__file__).parents[2]), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert buildinfo.git_commit() == head
    finally:
        buildinfo.git_commit.cache_clear()


def test_serve_on_a_port_in_use_exits_2_naming_the_address_before_any_banner(capsys, monkeypatch, state_dir):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err = run(capsys, "serve", "--state", str(state_dir), "--port", str(port))
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err
    assert "serving" not in err and "curl" not in err and out == ""


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_json_and_yaml_output_carry_the_same_document(capsys, state_dir, command):
    target = ["ml/p"] if command == "explain" else []
    documents = []
    for output in ("json", "yaml"):
        code, out, err = run(capsys, command, "--state", str(state_dir), "-o", output, *target)
        assert code == 0, err
        documents.append(orjson.loads(out) if output == "json" else yaml.safe_load(out))
    assert documents[0] == documents[1]
    code, out, _ = run(capsys, command, "--state", str(state_dir), "--output", "table", *target)
    assert code == 0 and "n1" in out and not out.lstrip().startswith("{")


def test_simulate_unknown_node_name_exits_2_naming_it(capsys, state_dir):
    code, out, err = run(capsys, "simulate", "--state", str(state_dir), "--nodes", "n1,ghost,n2,phantom")
    assert code == 2 and out == ""
    assert "--nodes" in err and "ghost, phantom" in err


def test_missing_state_directory_is_an_error_naming_it(capsys, tmp_path):
    code, out, err = run(capsys, "simulate", "--state", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    assert f"{tmp_path / 'nope'}: no such file or directory" in err


def test_empty_state_directory_is_a_warning(capsys, tmp_path):
    code, out, err = run(capsys, "simulate", "--state", str(tmp_path))
    assert code == 0
    assert orjson.loads(out) == {"pods": []}
    assert f"dra-extender: warning: {tmp_path}: no manifest files, no Node, Pod or DRA object" in err


def test_state_without_kubernetes_objects_the_extender_uses_is_a_warning(capsys, tmp_path):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(config_map))
    code, _, err = run(capsys, "simulate", "--state", str(tmp_path))
    assert code == 0
    assert f"warning: {tmp_path}: 1 manifest file(s), none with a Node, Pod or DRA object" in err


def _typo_claim() -> dict[str, Any]:
    typo = claim(NS, "pair", [request("gpus", "gpu", 2)])
    exactly = typo["spec"]["devices"]["requests"][0]["exactly"]
    exactly["cuont"] = exactly.pop("count")
    typo["spec"]["devicez"] = {}
    return typo


def test_unknown_fields_are_warnings_naming_file_object_and_path(capsys, state_dir):
    objects = [*_objects()[:4], _typo_claim(), _objects()[5]]
    (state_dir / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    code, out, err = run(capsys, "simulate", "--state", str(state_dir))
    assert code == 0
    file = state_dir / "cluster.yaml"
    assert (
        f"dra-extender: warning: {file}: ResourceClaim ml/pair: spec.devices.requests[0].exactly.cuont: "
        "unknown field" in err
    )
    assert f"{file}: ResourceClaim ml/pair: spec.devicez: unknown field" in err
    # The API server drops the field: count defaults to 1, so the pod fits with one GPU.
    [placed] = orjson.loads(out)["pods"]
    assert placed["node"] == "n1"
    assert len(placed["claims"][0]["allocation"]["devices"]["results"]) == 1


def test_strict_makes_unknown_fields_errors(capsys, state_dir):
    (state_dir / "typo.yaml").write_text(yaml.safe_dump(_typo_claim() | {"metadata": {"name": "t"}}))
    code, out, err = run(capsys, "simulate", "--strict", "--state", str(state_dir))
    assert code == 2 and out == ""
    path = "spec.devices.requests[0].exactly.cuont"
    assert f"{state_dir / 'typo.yaml'}: ResourceClaim default/t: {path}: unknown field" in err


def test_unknown_fields_follow_the_version_of_the_file():
    # v1beta1 keeps the request fields in the request itself; `exactly` is v1's.
    v1beta1 = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "labels": {"any": "label"}},
        "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu", "exactly": {}}]}},
    }
    assert unknown_fields(v1beta1) == ["spec.devices.requests[0].exactly"]
    sliced = resource_slice("s", DRIVER, "n1", [device("gpu-0")])
    sliced["spec"]["devices"][0]["attributes"] = {"model": {"strnig": "x"}, "free.name/ok": {"int": 1}}
    assert unknown_fields(sliced) == ["spec.devices[0].attributes[model].strnig"]
    opaque = claim(NS, "c", [request("r", "gpu")])
    opaque["spec"]["devices"]["config"] = [{"opaque": {"driver": DRIVER, "parameters": {"anything": 1}}}]
    assert unknown_fields(opaque) == []  # driver parameters are free-form (RawExtension)
    assert unknown_fields({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourceSlice", "x": 1}) == []


def test_invalid_device_class_cel_is_reported_when_it_loads(capsys, state_dir):
    broken = device_class("broken", 'device.driver == "a"')
    broken["spec"]["selectors"].append({"cel": {"expression": "device.driver =="}})
    (state_dir / "classes.yaml").write_text(yaml.safe_dump(broken))
    code, _, err = run(capsys, "simulate", "--state", str(state_dir))
    assert code == 0
    [line] = [line for line in err.splitlines() if "DeviceClass broken" in line]
    assert line.startswith(f"dra-extender: warning: {state_dir / 'classes.yaml'}: DeviceClass broken: ")
    assert "spec.selectors[1].cel.expression: " in line
    assert "spec.selectors[0]" not in err  # the first selector compiles
    code, _, err = run(capsys, "simulate", "--strict", "--state", str(state_dir))
    assert code == 2
    assert "DeviceClass broken: spec.selectors[1].cel.expression" in err


def test_known_fields_file_matches_kubernetes_validate():
    pytest.importorskip("kubernetes_validate")
    assert SCHEMA_FILE.read_bytes() == render(generate()), "run `make known-fields`"


def test_bash_completion_completes_commands_and_flags(capsys, tmp_path):
    import shutil
    import subprocess

    code, script, _ = run(capsys, "completion", "bash")
    assert code == 0
    path = tmp_path / "completion.bash"
    path.write_text(script)
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    probe = (
        f"source {path}; "
        'COMP_WORDS=(dra-extender si); COMP_CWORD=1; _shtab_dra_extender; echo "${COMPREPLY[@]}"; '
        'COMP_WORDS=(dra-extender explain --kube); COMP_CWORD=2; _shtab_dra_extender; echo "${COMPREPLY[@]}"'
    )
    done = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.splitlines() == ["simulate", "--kubeconfig"]


def test_zsh_completion_is_a_compdef_script(capsys):
    code, script, _ = run(capsys, "completion", "zsh")
    assert code == 0 and script.startswith("#compdef dra-extender")
    assert "--kubeconfig" in script and "simulate" in script
