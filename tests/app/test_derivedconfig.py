"""The extender config file: cluster-wide derived attributes through build_runtime, reload, errors, CLI."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import yaml

from app.cli.main import main, parse_args
from app.cli.reload import config_watcher
from app.cli.runtime import StartupError, build_runtime
from app.cli.simulate import simulate
from app.config.derivedconfig import ConfigError, ConfigWatcher, load_config
from tests.builders import claim, device, device_class, node, pod, request, resource_slice, write_state

GPU, NIC = "gpu.nvidia.com", "dra.net"
NS = "ml"
GPU_NUMA = {"name": "example.com/numa", "driver": GPU, "expression": f'device.attributes["{GPU}"].numa'}
NIC_NUMA = {"name": "example.com/numa", "driver": NIC, "expression": f'device.attributes["{NIC}"].numaNode'}


def _objects() -> list[dict[str, Any]]:
    """Node n1: gpu-0 (numa 0), gpu-1 (numa 1), nic-0 (numaNode 1); node n2: gpu-0 (numa 0) only. One pod
    wants a GPU and a NIC on the same example.com/numa: with both config entries the only answer is
    gpu-1 + nic-0 on n1."""
    same_numa = claim(NS, "pair", [request("gpu", "gpu"), request("nic", "nic")])
    same_numa["spec"]["devices"]["constraints"] = [{"matchAttribute": "example.com/numa"}]
    return [
        node("n1"),
        node("n2"),
        device_class("gpu", f'device.driver == "{GPU}"'),
        device_class("nic", f'device.driver == "{NIC}"'),
        resource_slice("n1-gpus", GPU, "n1", [device("gpu-0", {"numa": 0}), device("gpu-1", {"numa": 1})]),
        resource_slice("n1-nics", NIC, "n1", [device("nic-0", {"numaNode": 1})]),
        resource_slice("n2-gpus", GPU, "n2", [device("gpu-0", {"numa": 0})]),
        same_numa,
        pod(NS, "p", ["pair"]),
    ]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return write_state(tmp_path, _objects())


def write(path: Path, attributes: list[dict[str, Any]] | None = None, text: str | None = None) -> Path:
    path.write_text(text if text is not None else yaml.safe_dump({"derivedAttributes": attributes or []}))
    return path


def devices(document: dict[str, Any]) -> list[tuple[str, str]]:
    allocation = document["pods"][0]["claims"][0]["allocation"]
    return [(r["request"], r["device"]) for r in allocation["devices"]["results"]]


# --- build_runtime -----------------------------------------------------------------------------------------


def test_constraint_on_one_attribute_across_drivers(state_dir: Path, tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [GPU_NUMA, NIC_NUMA])
    runtime = build_runtime(state_dir, config=config)
    assert runtime.problems == []
    document = simulate(runtime.service)
    assert document["pods"][0]["node"] == "n1"
    assert devices(document) == [("gpu", "gpu-1"), ("nic", "nic-0")]


def test_selectors_see_config_attributes(state_dir: Path, tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [GPU_NUMA, NIC_NUMA])
    runtime = build_runtime(state_dir, config=config, cel_engine="cel-python")
    one_gpu = pod(NS, "q", ["numa0"])
    numa0 = claim(NS, "numa0", [request("gpu", "gpu")])
    numa0["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["example.com"].numa == 0'}}
    ]
    runtime.state.apply("ResourceClaim", numa0)
    outcome = runtime.service.filter(one_gpu, ["n1", "n2"])
    assert (outcome.passed, outcome.error) == (["n1", "n2"], "")


def test_runtime_errors_are_summarised_at_startup_and_fail_no_pod(state_dir: Path, tmp_path: Path):
    # Unscoped: the NIC has no "numa" in the gpu domain.
    broken = {"name": "example.com/numa", "expression": f'device.attributes["{GPU}"].numa'}
    config = write(tmp_path / "derived.yaml", [broken])
    runtime = build_runtime(state_dir, config=config)
    assert runtime.problems == [
        f"{config}: derived attribute example.com/numa (derived.yaml: derivedAttributes[0]): failed on 1 "
        f"device, e.g. device {NIC}/n1/nic-0: CEL runtime error: no such key: numa "
        f"(expression 'device.attributes[\"{GPU}\"].numa')"
    ]
    # Not an error for the pod: the NIC simply lacks the attribute its constraint matches on.
    outcome = runtime.service.filter(runtime.state.get("Pod", f"{NS}/p"), ["n1"])
    assert (outcome.error, outcome.passed) == ("", [])
    assert "example.com/numa" in {**outcome.failed, **outcome.unresolvable}["n1"]


def test_bad_config_stops_startup_naming_file_and_field(state_dir: Path, tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [{"name": "numa", "expression": "1"}])
    with pytest.raises(
        StartupError, match=r"derived\.yaml: derivedAttributes\[0\]\.name: 'numa' must be qualified"
    ):
        build_runtime(state_dir, config=config)
    write(config, [{"name": "example.com/x", "expression": "1 +"}])
    with pytest.raises(
        StartupError, match=r"derived attribute example\.com/x \(derived\.yaml: derivedAttributes"
    ):
        build_runtime(state_dir, config=config)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("derivedAttributes: [", "not valid YAML"),
        ("- a\n", "must be a mapping with a derivedAttributes list, got list"),
        ("derivedAtributes: []\n", "derivedAtributes: unknown field (known: derivedAttributes)"),
        ("derivedAttributes: {}\n", "derivedAttributes: must be a list, got dict"),
        ("derivedAttributes: [1]\n", "derivedAttributes[0]: must be a mapping, got int"),
        ("derivedAttributes: [{expression: '1'}]\n", "derivedAttributes[0].name: required field is missing"),
        (
            "derivedAttributes: [{name: a.b/c}]\n",
            "derivedAttributes[0].expression: required field is missing",
        ),
        (
            "derivedAttributes: [{name: a.b/c, expression: 1}]\n",
            "derivedAttributes[0].expression: must be a string",
        ),
        (
            "derivedAttributes: [{name: a.b/c, expression: '1', drivr: x}]\n",
            "derivedAttributes[0].drivr: unknown",
        ),
        (
            "derivedAttributes: [{name: A_B/c, expression: '1'}]\n",
            "name: domain 'A_B' must be a DNS subdomain",
        ),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, text: str, message: str):
    config = write(tmp_path / "c.yaml", text=text)
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value).startswith(str(config))
    assert message in str(error.value)


def test_empty_and_missing_files(tmp_path: Path):
    assert load_config(write(tmp_path / "empty.yaml", text="")).attributes == ()
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.yaml")


def _load_in_thread(path: Path) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def load() -> None:
        try:
            result.append(load_config(path))
        except ConfigError as e:
            result.append(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    return thread, result


def test_a_fifo_nobody_writes_is_read_at_once_as_empty(tmp_path: Path):
    # open() of a FIFO waits for a writer: `--config` naming one hung the command forever, silently.
    fifo = tmp_path / "extender.yaml"
    os.mkfifo(fifo)
    thread, result = _load_in_thread(fifo)
    thread.join(timeout=5)
    if thread.is_alive():
        with fifo.open("wb"):  # release the blocked open, so the test run can end
            pass
        thread.join(timeout=5)
        pytest.fail("load_config waited for a writer")
    assert result[0].attributes == ()


def test_a_pipe_with_a_writer_is_read_whole(tmp_path: Path):
    # `--config <(kubectl get configmap ...)`: the writer may send after the open.
    fifo = tmp_path / "extender.yaml"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # holds the FIFO open for writing without blocking
    thread, result = _load_in_thread(fifo)
    time.sleep(0.2)
    os.write(writer, b"derivedAttributes:\n- {name: example.com/numa, expression: '1'}\n")
    os.close(writer)
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [a.name for a in result[0].attributes] == ["example.com/numa"]


# --- reload ----------------------------------------------------------------------------------------------


class FakeStat:
    """``os.stat`` with a counter as mtime, so every write is a change without sleeping."""

    def __init__(self) -> None:
        self.version = 0

    def __call__(self, path: Path) -> SimpleNamespace:
        real = os.stat(path)
        return SimpleNamespace(st_mtime_ns=self.version, st_size=real.st_size, st_ino=real.st_ino)


def _serve_watcher(state_dir: Path, config: Path, runtime: Any) -> ConfigWatcher:
    """The watcher ``serve --state state_dir --config config`` runs on ``runtime``'s service."""
    argv = ["serve", "--state", str(state_dir), "--config", str(config)]
    return config_watcher(argv, parse_args(argv), load_config(config), runtime.service)


def test_reload_rederives_and_keeps_the_previous_config_when_invalid(state_dir: Path, tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [GPU_NUMA, NIC_NUMA])
    runtime = build_runtime(state_dir, config=config)
    stat = FakeStat()
    watcher = _serve_watcher(state_dir, config, runtime)
    watcher.stat = stat  # a new "mtime" per write, no sleeping
    assert watcher.poll() is False  # the fake mtime differs from the real one, the bytes do not
    assert watcher.poll() is False  # unchanged
    service, the_pod = runtime.service, runtime.state.get("Pod", f"{NS}/p")
    assert service.filter(the_pod, ["n1", "n2"]).passed == ["n1"]

    # Without the NIC entry no NIC carries example.com/numa: no node fits.
    write(config, [GPU_NUMA])
    stat.version = 1
    assert watcher.poll() is True
    outcome = service.filter(the_pod, ["n1", "n2"])
    assert outcome.passed == [] and set(outcome.failed) | set(outcome.unresolvable) == {"n1", "n2"}

    # An invalid file is logged and ignored: the previous config stays.
    write(config, text="derivedAttributes: [{name: bare, expression: '1'}]\n")
    stat.version = 2
    assert watcher.poll() is False
    assert "derivedAttributes[0].name" in watcher.last_error
    assert service.filter(the_pod, ["n1", "n2"]).passed == []

    # A config that does not compile is rejected the same way.
    write(config, [{"name": "example.com/numa", "expression": "1 +"}])
    stat.version = 3
    assert watcher.poll() is False
    assert "CEL compile error" in watcher.last_error

    # Back to both entries: fits again, on the hand-worked devices.
    write(config, [GPU_NUMA, NIC_NUMA])
    stat.version = 4
    assert watcher.poll() is True
    assert (watcher.reloads, watcher.last_error) == (2, "")
    assert devices(simulate(service)) == [("gpu", "gpu-1"), ("nic", "nic-0")]


def test_a_removed_file_keeps_the_previous_config(state_dir: Path, tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [GPU_NUMA, NIC_NUMA])
    runtime = build_runtime(state_dir, config=config)
    watcher = _serve_watcher(state_dir, config, runtime)
    config.unlink()
    assert watcher.poll() is False
    assert "config file is gone" in watcher.last_error
    assert runtime.service.filter(runtime.state.get("Pod", f"{NS}/p"), ["n1"]).passed == ["n1"]


def test_watcher_thread_starts_and_stops(tmp_path: Path):
    config = write(tmp_path / "derived.yaml", [])
    applied = []
    watcher = ConfigWatcher(config, applied.append, interval=0.01)
    watcher.start()
    watcher.stop()
    assert applied == []


# --- command line ----------------------------------------------------------------------------------------


def test_simulate_with_config_and_engine(state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write(tmp_path / "derived.yaml", [GPU_NUMA, NIC_NUMA])
    for engine in ("cel-expr", "cel-python"):
        code = main(["simulate", "--state", str(state_dir), "--config", str(config), "--cel-engine", engine])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert devices(orjson.loads(out)) == [("gpu", "gpu-1"), ("nic", "nic-0")]


def test_simulate_reports_config_problems(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    config = write(tmp_path / "derived.yaml", [{"name": "example.com/numa", "expression": '{"a": 1}["b"]'}])
    assert main(["simulate", "--state", str(state_dir), "--config", str(config)]) == 0
    err = capsys.readouterr().err
    assert err.count("dra-extender: error: ") == 1  # one line for the attribute ...
    assert "failed on 4 devices" in err  # ... counting every device of the state
    bad = write(tmp_path / "bad.yaml", text="derivedAttributes: 3\n")
    assert main(["simulate", "--state", str(state_dir), "--config", str(bad)]) == 2
    assert "bad.yaml: derivedAttributes: must be a list" in capsys.readouterr().err


def test_unknown_engine_is_a_usage_error(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["simulate", "--state", str(state_dir), "--cel-engine", "fast"]) == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_an_empty_config_clears_the_previous_runtime_errors(state_dir: Path, tmp_path: Path):
    from app.config.derivedconfig import install

    broken = {"name": "example.com/numa", "expression": f'device.attributes["{GPU}"].numa'}
    runtime = build_runtime(state_dir, config=write(tmp_path / "derived.yaml", [broken]))
    assert runtime.problems
    empty = load_config(write(tmp_path / "empty.yaml", text="derivedAttributes: []\n"))
    assert install(empty, runtime.state.inventory, runtime.service.selectors) == []
    outcome = runtime.service.filter(runtime.state.get("Pod", f"{NS}/p"), ["n1"])
    # No runtime error any more: without the attribute the pod's constraint simply cannot be met.
    assert (outcome.passed, outcome.error) == ([], "")
    assert "derived attribute" not in outcome.failed["n1"]


def test_validate_checks_a_state_directory_and_a_config_file(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    good = write(tmp_path / "good.yaml", [GPU_NUMA, NIC_NUMA])
    assert main(["validate", "--state", str(state_dir), "--config", str(good)]) == 0
    assert capsys.readouterr().out == (
        f"{state_dir}: valid (2 nodes, 3 ResourceSlices, 4 devices, 1 ResourceClaims, 1 pending pods)\n"
        f"{good}: valid (2 derived attributes, computed on the state's devices)\n"
    )
    assert main(["validate", "--config", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: valid (2 derived attributes)\n"
    # Runtime errors on devices: usable, but a problem said once per attribute, and exit 1.
    failing = write(tmp_path / "failing.yaml", [{"name": "example.com/numa", "expression": '{"a": 1}["b"]'}])
    assert main(["validate", "--state", str(state_dir), "--config", str(failing)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[1] == f"{failing}: 1 problem (1 derived attributes, computed on the state's devices):"
    assert lines[2].startswith("  derived attribute example.com/numa") and "failed on 4 devices" in lines[2]
    assert len(lines) == 3 and err == ""
    # Unusable input: exit 2 naming the file and field.
    bad = write(tmp_path / "bad.yaml", text="derivedAttributes: 3\n")
    assert main(["validate", "--config", str(bad)]) == 2
    assert "bad.yaml: derivedAttributes: must be a list" in capsys.readouterr().err
    (state_dir / "broken.yaml").write_text("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nspec: 3\n")
    assert main(["validate", "--state", str(state_dir)]) == 2
    assert "broken.yaml" in capsys.readouterr().err
    assert main(["validate"]) == 2
    assert "validate needs --state DIR, --config FILE or both" in capsys.readouterr().err


async def test_metrics_count_the_devices_each_derived_attribute_failed_on(state_dir: Path, tmp_path: Path):
    import httpx

    from app.config.settings import Settings
    from app.http.api import create_app
    from tests.app.metrics_support import samples

    broken = {"name": "example.com/numa", "expression": f'device.attributes["{GPU}"].numa'}
    runtime = build_runtime(state_dir, config=write(tmp_path / "derived.yaml", [broken]))
    app = create_app(runtime.service, Settings(state_dir))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as http:
        text = (await http.get("/metrics")).text
    label = "derived attribute example.com/numa (derived.yaml: derivedAttributes[0])"
    values = samples(text)
    assert values[("dra_extender_derived_attribute_errors", frozenset({("attribute", label)}))] == 1
    assert values[("dra_extender_kept_pod_decisions", frozenset())] == 0
