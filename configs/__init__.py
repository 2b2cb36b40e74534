"""Hydra configs (installed as ``dynamiccl.configs``). Importing the package registers the schema
``config_schema`` (:mod:`.schema`) that ``train.yaml`` builds on, so every way of composing these
configs (the apps, the compose API in tests) finds it."""

from dynamiccl.configs import schema  # noqa: F401  (registers config_schema in the ConfigStore)
