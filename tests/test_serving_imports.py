"""cel-python is the cross-check engine (``--cel-engine cel-python``): the serving path must not import it,
so its import time and memory are paid only by whoever asks for it (issue 34, item 5)."""

import json
import subprocess
import sys

SERVING_MODULES = ["app.cli.main", "app.cli.serve", "app.http.api", "app.kube.runtime", "allocator.decide"]


def _loaded_after(modules: list[str], code: str = "") -> set[str]:
    script = "\n".join(
        [*(f"import {m}" for m in modules), code, "import json, sys; print(json.dumps(sorted(sys.modules)))"]
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out))


def test_serving_path_does_not_import_cel_python() -> None:
    loaded = _loaded_after(SERVING_MODULES)
    assert not {m for m in loaded if m == "celpy" or m.startswith(("celpy.", "allocator.cel.celpy"))}


def test_the_cross_check_engine_still_loads_when_asked_for() -> None:
    # The other side of the same check: if celpy were never importable, the test above would pass vacuously.
    loaded = _loaded_after(["allocator.cel.celpy_engine"])
    assert "celpy" in loaded
