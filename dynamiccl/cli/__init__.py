"""The ``dynamiccl`` command: one module per subcommand, each exposing ``register(subparsers)``."""
