"""The mypy configuration in pyproject.toml holds ``allocator/`` to every check ``mypy --strict`` turns on.

mypy applies ``strict = true`` to every module even when it is set in a per-module override, so the
allocator's override spells the flags out; this compares them with what the installed mypy's ``--strict``
enables, so a mypy upgrade that adds a strict flag fails here instead of silently loosening the check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mypy.main import process_options

ROOT = Path(__file__).resolve().parents[1]


def _options(config: Path, *flags: str) -> Any:
    """mypy's options for checking ``allocator/`` with ``config`` and command-line ``flags``."""
    _, options = process_options(["--config-file", str(config), *flags, str(ROOT / "allocator")])
    return options


def _flags(options: Any) -> dict[str, object]:
    names = (n for n in dir(options) if not n.startswith("_"))
    return {n: v for n in names if not callable(v := getattr(options, n))}


def test_allocator_is_checked_as_strictly_as_mypy_strict(tmp_path: Path) -> None:
    no_config = tmp_path / "empty.ini"
    no_config.write_text("[mypy]\n")
    plain = _flags(_options(no_config))
    strict = _flags(_options(no_config, "--strict"))
    turned_on = {name: value for name, value in strict.items() if plain[name] != value}
    assert "disallow_untyped_defs" in turned_on  # the comparison itself sees --strict
    project = _options(ROOT / "pyproject.toml")
    for module in ("allocator", "allocator.model", "allocator.cel.library"):
        effective = _flags(project.clone_for_module(module))
        assert {name: effective[name] for name in turned_on} == turned_on, module


def test_app_is_checked_in_default_mode_with_untyped_bodies() -> None:
    effective = _flags(_options(ROOT / "pyproject.toml").clone_for_module("app.state.statedir"))
    assert effective["check_untyped_defs"] is True
    assert effective["disallow_untyped_defs"] is False
