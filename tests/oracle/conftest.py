"""One oracle process for the whole test run (started on first use)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oracle.client import MISSING, Oracle, oracle_path


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    path = oracle_path()
    if path is None:
        pytest.skip(MISSING)
    with Oracle(path) as process:
        yield process
