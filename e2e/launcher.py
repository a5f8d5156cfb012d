"""``make e2e-up`` / ``make e2e-down``: the e2e control plane with the extender and kube-scheduler for
trying things by hand. ``up`` starts a supervisor in the background, waits until everything is ready and
prints how to reach it; the supervisor stops every component after ``--ttl`` seconds (or on ``down``),
so nothing is left running by accident."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from e2e.controlplane import ROOT, ControlPlane, build_binaries, remove

RUN_DIR = ROOT / ".cache" / "e2e-up"
PID_FILE = RUN_DIR / "supervisor.pid"
READY_FILE = RUN_DIR / "ready"


def _supervise(ttl: float) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    plane = ControlPlane(RUN_DIR, build_binaries())
    try:
        plane.start()
        plane.start_extender()
        plane.start_scheduler()
        READY_FILE.write_text(f"{plane.server}\n{plane.extender_url}\n")
        stop.wait(ttl)
    finally:
        plane.stop()
        PID_FILE.unlink(missing_ok=True)
        READY_FILE.unlink(missing_ok=True)


def _up(ttl: float) -> int:
    if PID_FILE.exists():
        print(
            f"already up (supervisor pid {PID_FILE.read_text().strip()}); make e2e-down first",
            file=sys.stderr,
        )
        return 2
    remove(RUN_DIR)
    RUN_DIR.mkdir(parents=True)
    log = (RUN_DIR / "supervisor.log").open("ab")
    child = subprocess.Popen(
        [sys.executable, "-m", "e2e.launcher", "supervise", f"--ttl={ttl}"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    PID_FILE.write_text(str(child.pid))
    deadline = time.monotonic() + 1800  # a cold build of the components comes first
    while not READY_FILE.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            print((RUN_DIR / "supervisor.log").read_text(errors="replace")[-4000:], file=sys.stderr)
            PID_FILE.unlink(missing_ok=True)
            return 1
        time.sleep(0.5)
    server, extender = READY_FILE.read_text().split()
    print(
        f"control plane up (stops by itself in {ttl / 60:.0f} min, or: make e2e-down)\n"
        f"  kube-apiserver  {server}\n"
        f"  dra-extender    {extender}   (kube-scheduler profile: dra-scheduler)\n"
        f"  export KUBECONFIG={RUN_DIR / 'admin.kubeconfig'}\n"
        f"  logs            {RUN_DIR / 'logs'}"
    )
    return 0


def _down() -> int:
    if not PID_FILE.exists():
        print("not running")
        return 0
    pid = int(PID_FILE.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        PID_FILE.unlink(missing_ok=True)
        return 0
    deadline = time.monotonic() + 60
    while PID_FILE.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    print("control plane stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.launcher")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "supervise"):
        sub.add_parser(name).add_argument(
            "--ttl", type=float, default=7200.0, help="seconds before it stops itself"
        )
    sub.add_parser("down")
    args = parser.parse_args(argv)
    if args.command == "up":
        return _up(args.ttl)
    if args.command == "supervise":
        _supervise(args.ttl)
        return 0
    return _down()


if __name__ == "__main__":
    raise SystemExit(main())
