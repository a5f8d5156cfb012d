"""``--config FILE`` with ``kind: ExtenderConfiguration``: every setting from the file, flags override it,
a bad field is an error naming its path, and docs/configuration.md documents every field."""

from __future__ import annotations

import math
import re
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
from app.config.settings import RANGES
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
        "filterTimeoutSeconds": 2.5,
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
    assert scheduling.filter_timeout_seconds == 2.5
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


def test_validate_accepts_a_versioned_file(tmp_path, capsys):
    config = _write(tmp_path, FULL)
    assert cli.main(["validate", "--config", str(config)]) == 0
    assert capsys.readouterr().out == f"{config}: valid (1 derived attributes)\n"


def test_the_configuration_reference_documents_every_field_and_no_other():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    for spec in FIELDS:
        row = (
            f"| `{spec.path}` | {spec.kind.replace('|', chr(92) + '|')} | {spec.flag and f'`{spec.flag}`'} |"
        )
        assert row in reference, row
    table = reference.partition("| field | type | flag | meaning |")[2].partition("\n\n")[0]
    documented = re.findall(r"^\| `([\w.]+)` \|", table, re.MULTILINE)
    assert sorted(documented) == sorted(spec.path for spec in FIELDS)


NUMERIC = [spec for spec in FIELDS if spec.kind in ("integer", "number")]
DURATIONS = [spec for spec in FIELDS if spec.kind == "number" and spec.path.endswith("Seconds")]
"""Number fields in seconds; the others are the backoff jitter (0..1) and rates (at most 10,000 a
second)."""


@pytest.mark.parametrize("spec", NUMERIC, ids=lambda spec: spec.path)
@pytest.mark.parametrize("value", [-1, 0, float("inf"), float("nan"), 70_000.5])
def test_every_numeric_field_rejects_values_out_of_its_range_naming_it(tmp_path, spec, value):
    """No numeric setting takes a negative, zero (jitter aside), infinite or NaN value, and none takes
    70,000.5 seconds of jitter or a fraction where an integer is meant (the port's range ends at 65535)."""
    section, name = spec.path.split(".")
    config = _write(tmp_path, {**HEADER, section: {name: value}})
    zero_fine = (
        "cluster.backoffJitter",
        "cluster.preemptionEvictionsPerMinute",
        "cluster.prioritizeHoldSeconds",
        "scheduling.percentageOfNodesToScore",
        "scheduling.schedulerPercentageOfNodesToScore",
        "server.verbosity",
    )
    if value == 0 and spec.path in zero_fine:
        # No jitter at all is fine; 0 evictions a minute turns the extender's own preemption off, 0 s of
        # prioritize holds turns those off; 0 % to score is kube-scheduler's adaptive default; -v 0 is
        # klog's.
        load_config(config)
        return
    if value == 70_000.5 and spec in DURATIONS:
        load_config(config)  # a long time, but a time
        return
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value).startswith(f"{config}: {spec.path}: must be"), str(error.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"scheduling": {"filterTimeBudgetSeconds": float("inf")}}, "must be a finite number, got inf"),
        ({"scheduling": {"filterTimeBudgetSeconds": -2}}, "must be positive, got -2"),
        ({"cluster": {"backoffJitter": 1.5}}, "must be in 0..1, got 1.5"),
        ({"scheduling": {"percentageOfNodesToScore": 101}}, "must be in 0..100, got 101"),
        ({"scheduling": {"percentageOfNodesToScore": 12.5}}, "must be an integer, got 12.5"),
        ({"scheduling": {"schedulerPercentageOfNodesToScore": 101}}, "must be in 0..100, got 101"),
        ({"cluster": {"listPageSize": 0}}, "must be positive, got 0"),
        ({"server": {"port": 70000}}, "must be in 1..65535, got 70000"),
        # An API list limit of 2**70 was sent as it is; beyond the page size's maximum is refused.
        ({"cluster": {"listPageSize": 2**70}}, "must be at most 10000, got 1180591620717411303424"),
        ({"cluster": {"listPageSize": 10001}}, "must be at most 10000, got 10001"),
        ({"cluster": {"watchTimeoutSeconds": 86401}}, "must be at most 86400 (one day), got 86401"),
        # 1e300 seconds overflowed timers (threading's wait: OverflowError) or never ended.
        ({"cluster": {"bindTimeoutSeconds": 1.0e300}}, "must be at most 86400 (one day), got 1e+300"),
        (
            {"scheduling": {"filterTimeBudgetSeconds": 86400.5}},
            "must be at most 86400 (one day), got 86400.5",
        ),
        ({"cluster": {"backoffJitter": 1.0e300}}, "must be in 0..1, got 1e+300"),
        # 10**15 bytes took the body limit away: 32 MiB at most (bodies parse to ~5.5x their size).
        (
            {"server": {"maxBodyBytes": 10**15}},
            "must be at most 33554432 (32 MiB), got 1000000000000000",
        ),
        (
            {"server": {"maxBodyBytes": 32 * 1024 * 1024 + 1}},
            "must be at most 33554432 (32 MiB), got 33554433",
        ),
        ({"scheduling": {"scoreWeights": {"numa": -1}}}, "score weights: must be finite and >= 0"),
        (
            {"scheduling": {"scoreWeights": {"numa": 1.0e300}}},
            "score weights: at most 1000 each (only their ratios matter), got numa=1e+300",
        ),
    ],
)
def test_validate_and_every_command_refuse_a_value_out_of_range(tmp_path, capsys, fields, message):
    (section,) = fields
    (name,) = fields[section]
    config = _write(tmp_path, {**HEADER, **fields})
    for argv in (["validate"], ["simulate", "--state", "examples/cluster"]):
        assert cli.main([*argv, "--config", str(config)]) == 2
        assert f"{config}: {section}.{name}: {message}" in capsys.readouterr().err


INTEGER = [spec for spec in FIELDS if spec.kind == "integer"]


@pytest.mark.parametrize("spec", INTEGER, ids=lambda spec: spec.path)
@pytest.mark.parametrize("value", [2**63, 2**70, 10**400], ids=["2**63", "2**70", "10**400"])
def test_every_integer_field_has_a_maximum_naming_it(tmp_path, spec, value):
    """No integer setting takes more than int64 holds; 10**400, too large for a float, is refused the
    same way (it was an OverflowError traceback)."""
    section, name = spec.path.split(".")
    config = _write(tmp_path, {**HEADER, section: {name: value}})
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value).startswith(f"{config}: {spec.path}: must be "), str(error.value)


def test_an_integer_of_more_digits_than_python_converts_names_the_file_and_line(tmp_path, capsys):
    # 5001 digits: Python's int() refuses more than 4300, which was a message naming neither.
    config = tmp_path / "extender.yaml"
    config.write_text(yaml.safe_dump(HEADER) + "cluster:\n  listPageSize: 1" + "0" * 5000 + "\n")
    assert cli.main(["validate", "--config", str(config)]) == 2
    assert (
        f"{config}: line 4: not valid YAML: integer out of range (64-bit): 5001 digits"
        in capsys.readouterr().err
    )


def test_the_largest_body_limit_is_taken(tmp_path):
    config = _write(tmp_path, {**HEADER, "server": {"maxBodyBytes": 32 * 1024 * 1024}})
    assert load_config(config).settings["server"] == {"max_body_bytes": 33_554_432}


def test_the_largest_list_page_is_taken(tmp_path):
    config = _write(tmp_path, {**HEADER, "cluster": {"listPageSize": 10_000, "watchTimeoutSeconds": 86_400}})
    assert load_config(config).settings["cluster"] == {
        "list_page_size": 10_000,
        "watch_timeout_seconds": 86_400,
    }


NUMBER = [spec for spec in FIELDS if spec.kind == "number"]


@pytest.mark.parametrize("spec", NUMBER, ids=lambda spec: spec.path)
@pytest.mark.parametrize("value", [1.0e300, 86_400.5, 1.7976931348623157e308])
def test_every_number_field_has_a_maximum_naming_it(tmp_path, spec, value):
    """No duration takes more than one day (the jitter stays in 0..1, a rate at most 10,000 a second)."""
    section, name = spec.path.split(".")
    config = _write(tmp_path, {**HEADER, section: {name: value}})
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value).startswith(f"{config}: {spec.path}: must be "), str(error.value)


def test_every_numeric_setting_is_bounded_above():
    assert all(r.high < math.inf for r in RANGES.values()), RANGES


@pytest.mark.parametrize("spec", DURATIONS, ids=lambda s: s.path)
def test_one_day_is_taken(tmp_path, spec):
    section, name = spec.path.split(".")
    config = _write(tmp_path, {**HEADER, section: {name: 86_400}})
    assert list(load_config(config).settings[section].values()) == [86_400]


@pytest.mark.parametrize(
    ("flag", "value", "setting"),
    [
        (
            "--orphan-grace-period",
            "1e300",
            "orphan_grace_period_seconds: must be at most 86400 (one day), got 1e+300",
        ),
        (
            "--binding-timeout",
            "86401",
            "binding_timeout_seconds: must be at most 86400 (one day), got 86401.0",
        ),
        ("--port", str(2**70), "port: must be in 1..65535, got 1180591620717411303424"),
        (
            "--max-body-bytes",
            str(10**15),
            "max_body_bytes: must be at most 33554432 (32 MiB), got 1000000000000000",
        ),
        ("--orphan-grace-period", "inf", "orphan_grace_period_seconds: must be a finite number, got inf"),
        (
            "--score-weights",
            "pcie=1e308",
            "score weights: at most 1000 each (only their ratios matter), got pcie=1e+308",
        ),
        ("--binding-timeout", "nan", "binding_timeout_seconds: must be a finite number, got nan"),
        ("--binding-timeout", "-5", "binding_timeout_seconds: must be positive, got -5.0"),
        ("--kube-api-qps", "0", "api_qps: must be positive, got 0.0"),
        ("--kube-api-burst", "0", "api_burst: must be positive, got 0"),
        ("--percentage-of-nodes-to-score", "101", "percentage_of_nodes_to_score: must be in 0..100, got 101"),
    ],
)
def test_a_flag_out_of_range_names_the_setting(tmp_path, capsys, monkeypatch, flag, value, setting):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "unused"))
    assert cli.main(["serve", flag, value]) == 2
    assert setting in capsys.readouterr().err


def test_a_config_file_larger_than_a_configmap_is_refused_unread(tmp_path):
    config = tmp_path / "huge.yaml"
    config.write_text(yaml.safe_dump(HEADER) + ("# " + "x" * 1021 + "\n") * 1025)  # 1 KiB lines: > 1 MiB
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert str(error.value) == f"{config}: larger than 1 MiB (the most a ConfigMap holds)"
    # A file that never ends is read no further than that either.
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_config(Path("/dev/zero"))
