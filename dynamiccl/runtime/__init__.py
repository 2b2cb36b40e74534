"""DynamICCL inside the job: what a tuner plugin alone cannot do (issue "In the job").

One line in a training script — ``model = dynamiccl.runtime.ddp(model, device_ids=[rank])`` — and
per gradient bucket the job runs NCCL's all-reduce steered by the plugin, StragglAR for a persistent
straggler, or a bandwidth-aware hierarchical all-reduce, whichever the simulator predicts fastest
for the job's topology (``RuntimeConfig(topology=...)``); every rank measures arrival skew and the
compute/comm ratio, rank 0 decides, and every rank switches at the same step and tells the plugin the
new context. The job starts only if every rank holds the same policy. An online tuner can be passed
in to pin the fastest configuration per size bin, never one slower than NCCL's own.

Modules: ``core`` (the runtime), ``hook`` (DDP integration), ``decide`` (the decision window),
``paths`` (each bucket's path, predicted by the simulator for the job's topology),
``stragglar``/``matchings`` (seed 004), ``hierarchical`` (seed 000), ``tuning`` (online tuning),
``timing`` (collective times from NCCL's profiler when it is loaded), ``plugin_control`` (the
plugin's C controls), ``jobcheck`` (the job-start check).
"""

from dynamiccl.runtime.core import Runtime, RuntimeConfig
from dynamiccl.runtime.decide import JobState
from dynamiccl.runtime.hook import comm_hook, ddp, install, start
from dynamiccl.runtime.jobcheck import JobMismatchError, check_job
from dynamiccl.runtime.tuning import Candidate, OnlineTuner, SizeBin

__all__ = ["Candidate", "JobMismatchError", "JobState", "OnlineTuner", "Runtime", "RuntimeConfig",
           "SizeBin", "check_job", "comm_hook", "ddp", "install", "start"]
