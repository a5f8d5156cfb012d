"""One control plane for the whole e2e session (``make e2e``): built binaries, etcd, kube-apiserver,
kube-controller-manager, the extender and kube-scheduler configured with the shipped manifests. Each
scenario works in its own namespace with its own driver and DeviceClass, so scenarios never compete for
devices. Component logs stay in the run directory and are printed when a scenario fails; the session
ends with a summary table."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from e2e.controlplane import ROOT, ControlPlane, build_binaries, remove
from e2e.workload import CREATED, Scenario, summary_table

RUN_DIR = Path(os.environ.get("E2E_RUN_DIR", ROOT / ".cache" / "e2e-run"))


@contextlib.contextmanager
def started_plane(
    directory: Path,
    extender_args: Sequence[str] = (),
    nodes_to_score: int | None = None,
    device_scoring: str = "prioritize",
) -> Iterator[ControlPlane]:
    """A control plane run from ``directory`` (emptied first), its extender given ``extender_args`` and
    ``--device-scoring``, its kube-scheduler ``nodes_to_score`` and the matching extender entry
    (``ControlPlane.start_scheduler``); the logs are printed when it fails to start or a test using it
    fails."""
    remove(directory)
    plane = ControlPlane(directory, build_binaries())
    try:
        plane.start()
        plane.start_extender(*extender_args, f"--device-scoring={device_scoring}")
        plane.start_scheduler(nodes_to_score=nodes_to_score, device_scoring=device_scoring)
        yield plane
    except BaseException:
        print(plane.report_logs())
        raise
    finally:
        try:
            # A scenario a failed test left unfinished is finished while its plane still answers, not by
            # a later scenario's teardown once the plane is gone.
            for scenario in CREATED:
                if scenario.plane is plane:
                    scenario.finish()
        finally:
            plane.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with started_plane(RUN_DIR) as plane:
        yield plane


@pytest.fixture
def scenario(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[Scenario]:
    name = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    scenario = Scenario.create(control_plane, name)
    yield scenario
    for sc in CREATED:
        sc.finish()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(control_plane.report_logs())
    # Whatever kube-scheduler does, the extender answers every verb: a bug shows as an internal error.
    internal = [line for line in scenario.extender_log() if "internal error" in line]
    assert not internal, f"the extender hit internal errors: {internal[:3]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CREATED:
        terminalreporter.write_line("")
        terminalreporter.write_line(summary_table(CREATED))
        terminalreporter.write_line(f"component logs: {RUN_DIR / 'logs'}")
