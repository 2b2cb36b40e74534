"""The ``dynamiccl`` command, and the project's composition root.

This package is the one place that wires the layers together (core ← envs ← agents, profiler, the
plugin); nothing below imports it. One module per subcommand, each exposing ``register(subparsers)``;
``common`` holds what they share (``UserError``, argument types that validate at the boundary) and
``main`` sorts errors into the user's (one line, exit 2) and bugs (one line, exit 1).
"""
