"""``python -m app``: the ``dra-extender`` command line."""

from app.cli import run

raise SystemExit(run())
