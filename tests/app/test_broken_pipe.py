"""A reader of stdout that leaves early (``dra-extender completion bash | head -3``): the command stops
quietly, exit status 1 (as rich's console exits when a table's write fails so), whichever command
printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "examples/cluster")


@pytest.mark.parametrize(
    "argv",
    [
        ["completion", "bash"],
        ["simulate", "--state", DEMO],
        ["simulate", "--state", DEMO, "-o", "table"],
        ["explain", "--state", DEMO, "demo/two-gpus"],
    ],
)
def test_a_closed_stdout_exits_quietly(argv):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write fails with EPIPE
    try:
        process = subprocess.run(
            [sys.executable, "-m", "app", *argv],
            cwd=ROOT,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert process.stderr == ""
    assert process.returncode == 1
