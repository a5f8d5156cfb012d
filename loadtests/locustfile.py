"""Load test: kube-scheduler's cycle (filter -> prioritize -> bind) replayed against a running extender.

Run the extender on the demo cluster or a synthetic one (``python -m bench.server extender --port 8888
--nodes 500 --gpus 10`` serves a synthetic cluster with the bench-only ``/bench/pods`` route that creates
pending pods), then, with locust installed separately (``make loadtest`` installs it and orjson into
``.cache/loadtest-venv`` and runs all of this; it is not a test dependency because it patches the standard
library on import):

    .cache/loadtest-venv/bin/locust -f loadtests/locustfile.py --headless -u 1 -r 1 -t 30s \\
        --host http://127.0.0.1:8888 --csv .cache/loadtest/load --only-summary

One user reproduces kube-scheduler (one scheduling cycle at a time); more users stress the lock.
Settings: ``DRA_LOAD_NODES`` (node count of the synthetic cluster, default 500).
"""

from __future__ import annotations

import itertools
import os

import orjson
from locust import FastHttpUser, task

NODES = [f"node-{i:05d}" for i in range(int(os.environ.get("DRA_LOAD_NODES", "500")))]
_indexes = itertools.count(10_000_000)
_JSON = {"Content-Type": "application/json"}


class KubeScheduler(FastHttpUser):
    """Filter with every node name (nodeCacheCapable: true), prioritize the survivors, bind the best."""

    @task
    def schedule_one(self) -> None:
        created = self.client.post("/bench/pods", data=orjson.dumps({"index": next(_indexes)}), headers=_JSON)
        pod = orjson.loads(created.content)
        filtered = self.client.post(
            "/scheduler/filter", data=orjson.dumps({"Pod": pod, "NodeNames": NODES}), headers=_JSON
        )
        passed = orjson.loads(filtered.content)["NodeNames"] or []
        if not passed:
            return
        best = passed[0]
        if len(passed) > 1:
            scores = self.client.post(
                "/scheduler/prioritize", data=orjson.dumps({"Pod": pod, "NodeNames": passed}), headers=_JSON
            )
            best = max(orjson.loads(scores.content), key=lambda s: s["Score"])["Host"]
        meta = pod["metadata"]
        binding = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": best,
        }
        self.client.post("/scheduler/bind", data=orjson.dumps(binding), headers=_JSON)
