"""``python -m app``: the ``dra-extender`` command line."""

from app.cli.main import main

raise SystemExit(main())
