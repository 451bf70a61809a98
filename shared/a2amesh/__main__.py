"""``python -m a2amesh`` runs the CLI."""

from a2amesh.cli import main

raise SystemExit(main())
