"""``make bench-k8s``'s own measures, checked against what the kernel must have counted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.bench_k8s import Run, Usage, _waiting_seconds, allocation_problems, main, report

_BUSY = """
import hashlib, os, threading, time
os.sched_setaffinity(0, {os.sched_getaffinity(0).pop()})
block = bytes(1 << 20)
spun = threading.Barrier(4)
def spin():
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        hashlib.sha256(block)  # hashes outside the GIL: the three threads all want the core
    spun.wait()
    threading.Event().wait()  # alive until killed: an ended thread's count goes with it
print("ready", flush=True)
input()  # counted from here
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
spun.wait()
print("done", flush=True)
input()
"""

_IDLE = 'print("ready", flush=True); input()'


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_threads_sharing_one_core_are_counted_waiting_for_it():
    """Three threads hashing for 0.6 s on one core, outside the GIL: at any time one runs and the other
    two wait for the core, about 1.2 s of waiting in all (twice that if a thread's wait were counted
    twice); a process that only sleeps waits for nothing. Both are counted from once they have started:
    on a loaded machine starting Python waits for a core too."""
    with (
        subprocess.Popen(
            [sys.executable, "-c", _BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as busy,
        subprocess.Popen(
            [sys.executable, "-c", _IDLE], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as idle,
    ):
        try:
            assert busy.stdout is not None and busy.stdin is not None and idle.stdout is not None
            assert busy.stdout.readline() == b"ready\n" and idle.stdout.readline() == b"ready\n"
            busy_before, idle_before = _waiting_seconds(busy.pid), _waiting_seconds(idle.pid)
            busy.stdin.write(b"go\n")
            busy.stdin.flush()
            assert busy.stdout.readline() == b"done\n"
            assert _waiting_seconds(idle.pid) - idle_before < 0.05
            assert 0.8 < _waiting_seconds(busy.pid) - busy_before < 2.0
        finally:
            busy.kill()
            idle.kill()


def test_a_run_counts_what_each_running_component_used_after_it_began():
    """A component started during the run counts from zero; one gone by its end is not reported."""
    before = Usage({"etcd": 1.0, "kube-scheduler": 4.0}, {"etcd": 0.5, "kube-scheduler": 1.0})
    after = Usage({"etcd": 3.0, "kube-apiserver": 5.0}, {"etcd": 1.0, "kube-apiserver": 2.0})
    assert after.since(before) == Usage(
        {"etcd": 2.0, "kube-apiserver": 5.0}, {"etcd": 0.5, "kube-apiserver": 2.0}
    )


def _pod(name: str, node: str | None) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"nodeName": node} if node else {}}


def _claim(
    owner: str,
    node: str | None,
    device: str | None,
    reserved: tuple[str, ...] = (),
    pool: str = "",
    finalizers: tuple[str, ...] = ("resource.kubernetes.io/delete-protection",),
) -> dict:
    claim: dict = {
        "metadata": {
            "name": f"{owner}-gpu",
            "ownerReferences": [{"kind": "Pod", "uid": f"uid-{owner}"}],
            "finalizers": list(finalizers),
        },
        "status": {},
    }
    if node and device:
        claim["status"]["allocation"] = {
            "devices": {
                "results": [{"driver": "d", "pool": pool or node, "device": device, "request": "gpu"}]
            },
            "nodeSelector": _pinned(node),
        }
    claim["status"]["reservedFor"] = [{"resource": "pods", "uid": f"uid-{r}"} for r in reserved]
    return claim


def _pinned(node: str) -> dict:
    """The nodeSelector both allocators write for a node-local device (upstream's allocator result)."""
    return {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }


def test_a_run_with_a_pod_bound_without_its_device_is_refused():
    """Each bound pod must hold its own device on its node: the checks a run's pods and claims pass."""
    pods = [_pod(name, "n1") for name in "abdeghijklmnop"] + [_pod("c", "n2"), _pod("f", None)]
    no_devices = _claim("j", "n1", "gpu-9", ("j",))
    no_devices["status"]["allocation"]["devices"]["results"] = []
    no_selector = _claim("n", "n1", "gpu-8", ("n",))
    del no_selector["status"]["allocation"]["nodeSelector"]
    pod_p_elsewhere, pod_p_ok = _claim("p", "n2", "gpu-0", ("p",)), _claim("p", "n1", "gpu-10", ("p",))
    pod_p_ok["metadata"]["name"] = "p-gpu-2"
    claims = [
        _claim("a", "n1", "gpu-0", ("a",)),
        _claim("b", "n1", "gpu-0", ("b",)),  # a's device
        _claim("c", "n1", "gpu-1", ("c",)),  # allocated on another node than the pod's
        _claim("d", "n1", "gpu-2"),  # not reserved for d
        _claim("f", "n1", "gpu-3", ("f",)),  # a pending pod's claim holding gpu-3
        _claim("g", "n1", "gpu-3", ("g",), pool="n3"),  # the nodeSelector's node, another node's pool
        _claim("h", "n4", "gpu-4", ("h",), pool="n1"),  # the pod's node's pool, another node's selector
        _claim("i", "n1", "gpu-3", ("i",)),  # f's device
        no_devices,  # a nodeSelector without devices
        _claim("k", "n1", "gpu-5", ("k",), finalizers=()),  # allocated without the finalizer
        _claim("l", "n1", "gpu-6", ("x",)),  # reserved for another pod
        _claim("m", "n1", "gpu-7", ("m",), finalizers=("example.com/other",)),  # another finalizer only
        no_selector,  # devices without a node
        _claim("o", None, None, ("o",)),  # reserved, never allocated
        pod_p_elsewhere,  # the first of p's two claims: another node's
        pod_p_ok,
    ]
    assert allocation_problems(pods, claims) == [
        "d: not in the reservedFor of claim d-gpu",
        "e: no claim",
        "g: claim g-gpu holds devices of another node's pool",
        f"h: claim h-gpu has nodeSelector {_pinned('n4')}, not one pinned to n1",
        "j: claim j-gpu holds no devices",
        "k: claim k-gpu has no resource.kubernetes.io/delete-protection finalizer",
        "l: not in the reservedFor of claim l-gpu",
        "m: claim m-gpu has no resource.kubernetes.io/delete-protection finalizer",
        "n: claim n-gpu has nodeSelector None, not one pinned to n1",
        "o: claim o-gpu is not allocated",
        f"p: claim p-gpu has nodeSelector {_pinned('n2')}, not one pinned to n1",
        "p: claim p-gpu holds devices of another node's pool",
        f"c: claim c-gpu has nodeSelector {_pinned('n1')}, not one pinned to n2",
        "c: claim c-gpu holds devices of another node's pool",
        "d/n1/gpu-0 is in a-gpu and b-gpu",
        "d/n1/gpu-3 is in f-gpu and i-gpu",
    ]
    assert allocation_problems(pods[:1], claims[:1]) == []


def test_no_creating_threads_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["--create-threads", "0"])
    assert "--create-threads 0: at least 1 thread creates the pods" in capsys.readouterr().err


def test_the_headline_shows_how_fast_pods_were_created_and_how_long_the_last_bind_came_after():
    # By hand: 1000 pods created in 12.5 s and bound by 14.0 s (in-tree), created in 12.5 s and bound by
    # 13.0 s (extender): each side's created -> bound rate cannot pass 1000 / 12.5 = 80 pods/s.
    runs = [
        Run("in-tree", 1000, 14.0, [1.0, 2.0], cpu={"kube-apiserver": 10.0}, cpu_seconds=14.0),
        Run("extender", 1000, 13.0, [0.5, 1.0], cpu={"kube-apiserver": 9.0}, cpu_seconds=13.0),
    ]
    runs[0].creating_seconds = runs[1].creating_seconds = 12.5
    rows = {line.split("|")[1].strip(): line for line in report(runs, 500, 8, ">= 1.2x").splitlines()[2:]}
    created = [c.strip() for c in rows["pods/s created (created -> bound stays below)"].split("|")]
    assert created[2:5] == ["80.00", "80.00", ""]
    after = [c.strip() for c in rows["s from the last pod created to the last bound"].split("|")]
    assert after[2:5] == ["1.50", "0.50", ""]
    backlog = report(runs, 500, 8, ">= 1.2x", backlog=True)
    assert "pods/s created" not in backlog  # a backlog's pods exist before kube-scheduler starts
