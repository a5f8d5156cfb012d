"""manifests/ rendered from the Helm chart (``charts/dra-extender``), the one source of the deployment.

``python -m e2e.chart`` (``make manifests``) writes each template's ``helm template`` output to its file
under ``manifests/``: the chart's defaults plus ``namespace.create=true`` into ``manifests/base/`` (what
``kubectl apply -k manifests/`` and ``make e2e`` use), the monitoring templates into
``manifests/components/monitoring/``. ``--check`` writes nothing and fails naming every file that differs
(tests/app/kube/test_chart.py runs it). The kustomizations beside them are written by hand.

helm is the pinned build in ``.cache/`` (``make helm-bin``): another version could render other bytes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "dra-extender"
HELM_VERSION = "v4.3.2"  # the Makefile's HELM_VERSION
HELM = ROOT / ".cache" / f"helm-{HELM_VERSION}" / "helm"
RELEASE = NAMESPACE = "dra-extender"

BASE_VALUES = ("namespace.create=true",)
"""The chart's defaults, plus the namespace: ``kubectl apply -k`` has no ``--create-namespace``."""

OUTPUTS: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    (
        BASE_VALUES,
        "manifests/base",
        (
            "namespace.yaml",
            "serviceaccount.yaml",
            "rbac.yaml",
            "kube-scheduler-config.yaml",
            "deployment.yaml",
            "poddisruptionbudget.yaml",
            "service.yaml",
            "networkpolicy.yaml",
        ),
    ),
    (
        (*BASE_VALUES, "monitoring.serviceMonitor.enabled=true", "monitoring.dashboard.enabled=true"),
        "manifests/components/monitoring",
        ("servicemonitor.yaml", "dashboard.yaml"),
    ),
)
"""(values set, directory, the templates written there under their own names)."""

_SOURCE = re.compile(r"^---\n# Source: [^/\n]+/templates/(\S+)\n", re.MULTILINE)


def render(*values: str, values_file: Path | None = None) -> str:
    """``helm template`` of the chart as release ``dra-extender`` in namespace ``dra-extender``, with
    ``values_file`` and ``--set`` of each of ``values``. Raises FileNotFoundError without the pinned helm,
    CalledProcessError (with helm's message in ``stderr``) when the chart does not render."""
    if not HELM.is_file():
        raise FileNotFoundError(f"{HELM}: run `make helm-bin` (needs go)")
    command = [str(HELM), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values_file is not None:
        command += ["--values", str(values_file)]
    for value in values:
        command += ["--set", value]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout


def by_template(rendered: str) -> dict[str, str]:
    """The documents of ``helm template`` output grouped by the template that rendered them, in order."""
    parts = _SOURCE.split(rendered)
    documents: dict[str, list[str]] = {}
    for template, text in zip(parts[1::2], parts[2::2], strict=True):
        documents.setdefault(template, []).append(text.rstrip("\n") + "\n")
    return {template: "---\n".join(texts) for template, texts in documents.items()}


def generated() -> dict[Path, str]:
    """Every generated file of manifests/ and the text it must hold."""
    files: dict[Path, str] = {}
    for values, directory, templates in OUTPUTS:
        rendered = by_template(render(*values))
        for template in templates:
            header = (
                f"# charts/dra-extender/templates/{template} rendered by `make manifests`: edit the chart,\n"
                "# not this file (a test fails when they differ).\n"
            )
            files[ROOT / directory / template] = header + rendered[template]
    return files


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    for path, text in generated().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.write_text(text)
    if check and stale:
        names = ", ".join(str(p) for p in stale)
        print(f"out of date with charts/dra-extender: {names} (run `make manifests`)", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
