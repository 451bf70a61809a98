"""The ``a2amesh`` command line: parse, build Settings, call the client or a service, print.

Modules: :mod:`~a2amesh.cli.app` (the parser and :func:`main`), one module per group of verbs
(:mod:`~a2amesh.cli.mesh`, :mod:`~a2amesh.cli.runs`, :mod:`~a2amesh.cli.schedules`,
:mod:`~a2amesh.cli.workflows`), and what they share (:mod:`~a2amesh.cli.exits`, :mod:`~a2amesh.cli.settings`,
:mod:`~a2amesh.cli.output`, :mod:`~a2amesh.cli.serve`). Nothing below imports this package back.
"""

from a2amesh.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
