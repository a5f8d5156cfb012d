"""``make loadtest``: the command it runs is the one docs/performance.md documents, in an environment that
has what the locustfile imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from loadtests.run import locust_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_performance_guide_documents_the_command_make_loadtest_runs():
    makefile = (ROOT / "Makefile").read_text()
    venv = re.search(r"^LOADTEST_VENV := (\S+)$", makefile, re.MULTILINE).group(1)
    command = locust_command(
        f"{venv}/bin/locust", "http://127.0.0.1:8888", 30, 1, Path(".cache/loadtest/load")
    )
    assert " ".join(command) in (ROOT / "docs" / "performance.md").read_text()


def test_the_loadtest_environment_pins_every_import_of_the_locustfile():
    tree = ast.parse((ROOT / "loadtests/locustfile.py").read_text())
    imported = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    third_party = {name for name in imported if name not in {"__future__", "itertools", "os"}}
    lock = (ROOT / "loadtests/requirements.lock").read_text()
    pinned = set(re.findall(r"^([a-z0-9_.-]+)==", lock, re.MULTILINE))
    assert third_party == {"locust", "orjson"} and third_party <= pinned
