"""DynamICCL: learn better NCCL algorithm/protocol/channel choices and ship them into real jobs.

Importing the package registers the gymnasium environment ``dynamiccl/CollectiveTuning-v0`` (by a
string entry point, so nothing heavy is imported until ``gymnasium.make`` is called).
"""

__version__ = "0.1.0"
