"""Benchmark servers, run as subprocesses by ``bench/bench.py`` so client and server do not share a GIL.

``python -m bench.server extender --nodes N --gpus M --port P [--allocated K]``: the real extender app
(``app.http.api.create_app``) on a synthetic cluster, plus a bench-only router (never part of the product)
that creates and deletes pods the way the resourceclaim controller and kubelet would (``/bench/pods``).

``python -m bench.server floor --port P``: the floor — the same three routes that only parse the body
with orjson and echo a well-formed answer (all nodes pass, score 0, bind ok). No allocation work.
"""

from __future__ import annotations

import argparse
import gc
import logging
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.config.settings import SchedulingSettings, Settings
from app.http.api import create_app
from app.http.server import listen, serve
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from bench.synthetic import Shape, cluster_objects, gpu_pod, node_name

__all__ = ["build_service", "floor_app"]

_JSON = "application/json"


def build_service(shape: Shape, allocated: int = 0) -> SchedulingService:
    """The extender on a synthetic cluster; ``allocated`` claims are already allocated (1 GPU each)."""
    state = ClusterState.from_objects(cluster_objects(shape))
    for index in range(allocated):
        pod, claim = gpu_pod(1_000_000 + index)
        node, gpu = divmod(index, shape.gpus)
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": node_name(node),
                            "device": f"gpu-{gpu}",
                        }
                    ]
                }
            },
            "reservedFor": [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ],
        }
        pod["spec"]["nodeName"] = node_name(node)
        state.apply("ResourceClaim", claim)
        state.apply("Pod", pod)
    return SchedulingService(state, SelectorCache(ExprEngine()))


def _requested_pod(body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod and claim a ``/bench/pods`` body ``{"index": i, "gpus": n}`` asks for."""
    args = orjson.loads(body)
    return gpu_pod(int(args["index"]), int(args.get("gpus", 1)))


def _bench_router(app: FastAPI, service: SchedulingService) -> None:
    @app.post("/bench/pods")
    async def create(request: Request) -> Response:
        """Body ``{"index": i, "gpus": n}``: add a pending pod and its claim; answers the pod object."""
        pod, claim = _requested_pod(await request.body())
        with service.lock:
            service.state.apply("ResourceClaim", claim)
            service.state.apply("Pod", pod)
        return Response(orjson.dumps(pod), media_type=_JSON)

    @app.post("/bench/delete")
    async def delete(request: Request) -> Response:
        """Body ``{"name": pod}``: the pod finished; its claim is deallocated and deleted."""
        name = orjson.loads(await request.body())["name"]
        with service.lock:
            service.state.remove("ResourceClaim", f"bench/{name}-gpu")
            service.state.remove("Pod", f"bench/{name}")
        return Response(b"{}", media_type=_JSON)


def floor_app() -> FastAPI:
    """Parse-and-echo endpoints with the extender's wire shapes and no allocation work."""
    app = FastAPI()

    @app.post("/scheduler/filter")
    async def filter_(request: Request) -> Response:
        args: dict[str, Any] = orjson.loads(await request.body())
        answer = {
            "Nodes": None,
            "NodeNames": args.get("NodeNames"),
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
        return Response(orjson.dumps(answer), media_type=_JSON)

    @app.post("/scheduler/prioritize")
    async def prioritize(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return Response(
            orjson.dumps([{"Host": n, "Score": 0} for n in args.get("NodeNames") or []]), media_type=_JSON
        )

    @app.post("/scheduler/bind")
    async def bind(request: Request) -> Response:
        orjson.loads(await request.body())
        return Response(b'{"Error":""}', media_type=_JSON)

    @app.post("/bench/pods")
    async def create(request: Request) -> Response:
        pod, _ = _requested_pod(await request.body())
        return Response(orjson.dumps(pod), media_type=_JSON)

    @app.post("/bench/delete")
    async def delete(request: Request) -> Response:
        await request.body()
        return Response(b"{}", media_type=_JSON)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=("extender", "floor"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=10)
    parser.add_argument("--allocated", type=int, default=0)
    parser.add_argument("--nics", type=int, default=0, help="NICs per node on the GPUs' PCIe roots")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.kind == "floor":
        app = floor_app()
    else:
        service = build_service(Shape(args.nodes, args.gpus, args.nics), args.allocated)
        gc.collect()
        gc.freeze()  # as `dra-extender serve` does after loading its state
        # Every fitting node passed on, as the floor answers every node: a sample would shorten the answer
        # the floor is measured against.
        everything = SchedulingSettings(percentage_of_nodes_to_score=100)
        app = create_app(service, Settings(state_dir=Path("synthetic"), scheduling=everything))
        _bench_router(app, service)
    # Both on the extender's own listening socket (TCP_NODELAY on every connection, app.http.server).
    serve(app, listen("127.0.0.1", args.port), log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
