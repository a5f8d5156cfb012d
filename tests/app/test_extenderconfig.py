"""``--config FILE`` with ``kind: ExtenderConfiguration``: every setting from the file, flags override it,
a bad field is an error naming its path, and the README documents every field."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from allocator.features import FeatureGates
from app.cli import main as cli
from app.cli import runtime as cli_runtime
from app.cli.flags import cluster_settings
from app.config.derivedconfig import ConfigError, load_config
from app.config.extenderconfig import API_VERSION, FIELDS, KIND
from app.http import server as httpserver

ROOT = Path(__file__).resolve().parents[2]
HEADER = {"apiVersion": API_VERSION, "kind": KIND}


def _write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


FULL = {
    **HEADER,
    "server": {"port": 9911, "logLevel": "warning", "logFormat": "json", "maxBodyBytes": 4096},
    "scheduling": {
        "featureGates": {"DRAListTypeAttributes": True},
        "deviceSelection": "first-fit",
        "scoringPolicy": "spread",
        "scoreWeights": {"numa": 5},
        "filterTimeBudgetSeconds": 1.5,
    },
    "cluster": {
        "bindingTimeoutSeconds": 120,
        "bindTimeoutSeconds": 15,
        "schedulerNames": ["a", "b"],
        "watchIdleSeconds": 60,
        "listPageSize": 100,
    },
    "derivedAttributes": [{"name": "example.com/numa", "expression": "1"}],
}


def test_serve_takes_every_setting_from_the_file_and_flags_win(tmp_path, monkeypatch, capsys):
    calls: list[tuple[Any, dict[str, Any]]] = []

    def record(app: Any, sock: socket.socket, **options: Any) -> None:
        calls.append((app, options))
        sock.close()

    monkeypatch.setattr(httpserver, "serve", record)
    applied: list[Any] = []
    original = cli_runtime.apply_policies
    monkeypatch.setattr(
        cli_runtime,
        "apply_policies",
        lambda service, scheduling: (applied.append(scheduling), original(service, scheduling)),
    )
    config = _write(tmp_path, FULL)
    state = ROOT / "examples/cluster"
    assert cli.main(["serve", "--state", str(state), "--config", str(config), "--log-level", "error"]) == 0
    [(_, kwargs)] = calls
    assert kwargs["port"] == 9911  # from the file
    assert kwargs["log_level"] == "error"  # the flag beats the file's warning
    [scheduling] = applied
    assert scheduling.device_selection == "first-fit" and scheduling.scoring.policy == "spread"
    assert scheduling.scoring.weights["numa"] == 5 and scheduling.scoring.weights["pcie"] == 2
    assert scheduling.feature_gates == FeatureGates(DRAListTypeAttributes=True)
    assert scheduling.filter_time_budget_seconds == 1.5
    capsys.readouterr()


def test_cluster_settings_come_from_the_file_and_flags_win(tmp_path):
    config = _write(tmp_path, FULL)
    argv = ["serve", "--kubeconfig", str(tmp_path / "kubeconfig"), "--config", str(config)]
    settings = cluster_settings(cli.parse_args([*argv, "--binding-timeout", "300"]))
    assert settings is not None
    assert settings.binding_timeout_seconds == 300  # the flag
    assert settings.bind_timeout_seconds == 15 and settings.watch_idle_seconds == 60
    assert settings.list_page_size == 100 and settings.scheduler_names == ("a", "b")
    assert settings.orphan_grace_period_seconds == 300  # neither: the default


def test_simulate_takes_only_the_scheduling_section(tmp_path):
    config = _write(tmp_path, FULL)
    args = cli.parse_args(["simulate", "--state", "x", "--config", str(config)])
    assert args.device_selection == "first-fit"
    assert not hasattr(args, "bind_timeout_seconds") and not hasattr(args, "port")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**HEADER, "cluster": {"bindingTimeout": 5}}, "cluster.bindingTimeout: unknown field (known: "),
        (
            {**HEADER, "cluster": {"bindingTimeoutSeconds": "long"}},
            "cluster.bindingTimeoutSeconds: must be a number",
        ),
        ({**HEADER, "server": {"port": True}}, "server.port: must be an integer, got True"),
        (
            {**HEADER, "server": {"logFormat": "xml"}},
            "server.logFormat: must be one of text, json, got 'xml'",
        ),
        (
            {**HEADER, "scheduling": {"scoreWeights": {"nmua": 1}}},
            "scheduling.scoreWeights: score weight 'nmua=1'",
        ),
        (
            {**HEADER, "scheduling": {"featureGates": {"NoSuchGate": True}}},
            "scheduling.featureGates: unknown feature gate",
        ),
        ({**HEADER, "scheduling": []}, "scheduling: must be a mapping, got list"),
        ({**HEADER, "sever": {}}, "sever: unknown field"),
        ({"apiVersion": "v1", "kind": KIND}, f"apiVersion: must be {API_VERSION}, got 'v1'"),
        ({"apiVersion": API_VERSION}, f"kind: must be {KIND}, got None"),
        (
            {"server": {"port": 1}},
            f"server: unknown field (known: derivedAttributes); settings need apiVersion: {API_VERSION}",
        ),
    ],
)
def test_a_bad_field_is_an_error_naming_its_path(tmp_path, capsys, document, message):
    config = _write(tmp_path, document)
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value).startswith(f"{config}: ") and message in str(error.value)
    # The command line says the same and exits 2, before anything loads; validate too.
    assert cli.main(["serve", "--state", "examples/cluster", "--config", str(config)]) == 2
    assert message in capsys.readouterr().err
    assert cli.main(["validate", "--config", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_a_range_error_names_the_setting(tmp_path, capsys):
    config = _write(tmp_path, {**HEADER, "scheduling": {"filterTimeBudgetSeconds": 0}})
    assert cli.main(["simulate", "--state", "examples/cluster", "--config", str(config)]) == 2
    assert "filter_time_budget_seconds: must be positive, got 0" in capsys.readouterr().err


def test_validate_accepts_a_versioned_file(tmp_path, capsys):
    config = _write(tmp_path, FULL)
    assert cli.main(["validate", "--config", str(config)]) == 0
    assert capsys.readouterr().out == f"{config}: valid (1 derived attributes)\n"


def test_the_readme_documents_every_field():
    readme = (ROOT / "README.md").read_text()
    for spec in FIELDS:
        row = (
            f"| `{spec.path}` | {spec.kind.replace('|', chr(92) + '|')} | {spec.flag and f'`{spec.flag}`'} |"
        )
        assert row in readme, row
