"""A config file edited while ``serve`` runs (``app.cli.reload``): live settings change the next decision,
the others are logged as needing a restart, a flag keeps winning, nothing is logged as reloaded when
nothing changed, and the reload state is exposed with the file's hash."""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from app.cli.flags import settings_from_args
from app.cli.main import parse_args
from app.cli.reload import config_watcher
from app.cli.runtime import load_runtime
from app.config.derivedconfig import ConfigWatcher, load_config
from app.config.logs import configure
from app.http.metrics import ConfigReloadCollector, Metrics
from tests.app.metrics_support import samples
from tests.builders import claim, device, device_class, node, pod, request, resource_slice, write_state

DRIVER = "gpu.example.com"
NUMA = "resource.kubernetes.io/numaNode"
HEADER = {"apiVersion": "dra-extender.io/v1alpha1", "kind": "ExtenderConfiguration"}


def _objects() -> list[dict[str, Any]]:
    """n1: gpu-0 on NUMA node 0, gpu-1 and gpu-2 on NUMA node 1; ml/p wants two GPUs. first-fit takes
    gpu-0 and gpu-1 (upstream's order); aligned takes gpu-1 and gpu-2 (one NUMA node)."""
    gpus = [device("gpu-0", {NUMA: 0}), device("gpu-1", {NUMA: 1}), device("gpu-2", {NUMA: 1})]
    return [
        node("n1"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1", DRIVER, "n1", gpus),
        claim("ml", "pair", [request("gpus", "gpu", 2)]),
        pod("ml", "p", ["pair"]),
    ]


class _Stat:
    """``os.stat`` with a new mtime per ``touch()``: no sleeping between writes."""

    def __init__(self) -> None:
        self.version = 0

    def touch(self) -> None:
        self.version += 1

    def __call__(self, path: Path) -> SimpleNamespace:
        real = os.stat(path)
        return SimpleNamespace(st_mtime_ns=self.version, st_size=real.st_size, st_ino=real.st_ino)


class Served:
    """``serve --state DIR --config FILE [flags]``'s service and config watcher, without the HTTP server."""

    def __init__(self, tmp_path: Path, document: dict[str, Any], *flags: str) -> None:
        self.config = tmp_path / "extender.yaml"
        self.write(document)
        state = write_state(tmp_path, _objects())
        argv = ["serve", "--state", str(state), "--config", str(self.config), *flags]
        args = parse_args(argv)
        self.service = load_runtime(settings_from_args(args)).service
        self.stat = _Stat()
        self.watcher: ConfigWatcher = config_watcher(argv, args, load_config(self.config), self.service)
        self.watcher.stat = self.stat

    def write(self, document: dict[str, Any]) -> None:
        self.config.write_text(yaml.safe_dump({**HEADER, **document}))

    def edit(self, document: dict[str, Any]) -> bool:
        self.write(document)
        self.stat.touch()
        return self.watcher.poll()

    def devices(self) -> list[str]:
        """The devices a filter then a bind of ml/p choose on n1."""
        the_pod = self.service.state.get("Pod", "ml/p")
        assert self.service.filter(the_pod, ["n1"]).passed == ["n1"]
        return self.service.bind_outcome("ml", "p", "uid-pod-ml-p", "n1").devices


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """The records ``configure`` sends (text format); the root logger is put back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure("info", "text", stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def _lines(stream: io.StringIO, logger: str = "app.cli.reload") -> list[str]:
    return [
        line.split(f" {logger}: ", 1)[1] for line in stream.getvalue().splitlines() if f" {logger}: " in line
    ]


def test_a_live_edit_of_device_selection_changes_the_next_filters_choice(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"deviceSelection": "aligned"}})
    the_pod = served.service.state.get("Pod", "ml/p")
    assert served.service.filter(the_pod, ["n1"]).passed == ["n1"]  # decided (and kept) under aligned
    assert served.edit({"scheduling": {"deviceSelection": "first-fit"}}) is True
    assert served.devices() == ["ml/pair: gpu.example.com/n1/gpu-0", "ml/pair: gpu.example.com/n1/gpu-1"]
    [line] = _lines(logs)
    assert line == f"config {served.config} reloaded: applied scheduling.deviceSelection aligned -> first-fit"


def test_the_reverse_edit_too(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"deviceSelection": "first-fit"}})
    assert served.edit({"scheduling": {"deviceSelection": "aligned"}}) is True
    assert served.devices() == ["ml/pair: gpu.example.com/n1/gpu-1", "ml/pair: gpu.example.com/n1/gpu-2"]


def test_settings_that_need_a_restart_are_named_and_the_rest_is_applied(tmp_path, logs):
    served = Served(tmp_path, {"server": {"port": 9001}, "scheduling": {"deviceSelection": "aligned"}})
    edited = {
        "server": {"port": 9002, "logLevel": "debug"},
        "scheduling": {"deviceSelection": "first-fit", "celEngine": "cel-python"},
        "cluster": {"orphanGracePeriodSeconds": 60},
    }
    assert served.edit(edited) is True
    path = served.config
    assert _lines(logs) == [
        f"config {path}: server.port 9001 -> 9002 needs a restart; running with the previous value until "
        "then",
        f"config {path}: scheduling.celEngine cel-expr -> cel-python needs a restart; running with the "
        "previous value until then",
        f"config {path}: cluster.orphanGracePeriodSeconds 300.0 -> 60 needs a restart; running with the "
        "previous value until then",
        f"config {path} reloaded: applied server.logLevel info -> debug, scheduling.deviceSelection "
        "aligned -> first-fit",
    ]
    assert logging.getLogger().level == logging.DEBUG  # applied
    assert served.devices()[0] == "ml/pair: gpu.example.com/n1/gpu-0"  # first-fit, applied


def test_nothing_changed_is_never_logged_as_reloaded(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"deviceSelection": "aligned"}})
    assert served.edit({"scheduling": {"deviceSelection": "aligned"}}) is False  # rewritten, same bytes
    served.config.write_text("# a comment\n" + served.config.read_text())
    served.stat.touch()
    assert served.watcher.poll() is True
    assert _lines(logs) == [f"config {served.config} changed, but no setting did"]
    assert not [line for line in logs.getvalue().splitlines() if "reloaded" in line]


def test_a_flag_keeps_winning_over_the_file_and_says_so(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"deviceSelection": "aligned"}}, "--device-selection", "aligned")
    assert served.edit({"scheduling": {"deviceSelection": "first-fit", "scoringPolicy": "spread"}}) is True
    assert _lines(logs) == [
        f"config {served.config}: scheduling.deviceSelection changed in the file, but a command-line flag "
        "sets it",
        f"config {served.config} reloaded: applied scheduling.scoringPolicy binpack -> spread",
    ]
    assert served.devices()[0] == "ml/pair: gpu.example.com/n1/gpu-1"  # still aligned


def test_a_refused_edit_changes_nothing_and_the_metrics_say_so(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"deviceSelection": "aligned"}})
    metrics = Metrics(served.service, collectors=[ConfigReloadCollector(served.watcher)])

    def state() -> tuple[str, float]:
        values = samples(metrics.render().decode())
        [digest] = [dict(labels)["sha256"] for name, labels in values if name == "dra_extender_config_hash"]
        return digest, values[("dra_extender_config_last_reload_successful", frozenset())]

    first = hashlib.sha256(served.config.read_bytes()).hexdigest()
    assert state() == (first, 1)
    assert (
        served.edit({"scheduling": {"deviceSelection": "first-fit", "scoreWeights": {"numa": -1}}}) is False
    )
    assert state() == (first, 0)  # the file on disk is not in force
    assert served.devices()[0] == "ml/pair: gpu.example.com/n1/gpu-1"  # still aligned
    assert served.edit({"scheduling": {"deviceSelection": "first-fit"}}) is True
    assert state() == (hashlib.sha256(served.config.read_bytes()).hexdigest(), 1)


def test_a_feature_gate_edit_names_the_gate_that_changed_not_every_gate(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"featureGates": {"DRAAdminAccess": True}}})
    edited = {"scheduling": {"featureGates": {"DRAAdminAccess": False, "DRAListTypeAttributes": True}}}
    assert served.edit(edited) is True
    assert _lines(logs) == [
        f"config {served.config}: scheduling.featureGates.DRAAdminAccess True -> False needs a restart; "
        "running with the previous value until then",
        f"config {served.config}: scheduling.featureGates.DRAListTypeAttributes False -> True needs a "
        "restart; running with the previous value until then",
    ]


def test_a_live_edit_of_the_filter_timeout_reaches_the_service(tmp_path, logs):
    served = Served(tmp_path, {"scheduling": {"filterTimeoutSeconds": 10}})
    assert served.service.filter_timeout == 10
    assert served.edit({"scheduling": {"filterTimeoutSeconds": 2.5}}) is True
    assert served.service.filter_timeout == 2.5
    [line] = _lines(logs)
    assert line == f"config {served.config} reloaded: applied scheduling.filterTimeoutSeconds 10 -> 2.5"
