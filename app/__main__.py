"""``python -m app``: the ``dra-extender`` command line."""

from app.cli import main

raise SystemExit(main())
