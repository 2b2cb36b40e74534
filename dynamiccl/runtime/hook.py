"""The DDP communication hook and the one-line integration.

``model = dynamiccl.runtime.ddp(model, device_ids=[local_rank])`` checks that every rank holds the
same policy and plugin (before any collective of the job), wraps the model in
``DistributedDataParallel`` and registers the runtime's hook. For a model already wrapped,
``dynamiccl.runtime.install(ddp_model)`` does the same except that DDP's own start-up broadcast has
then already run.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations at run time and
# accepts only the real ``dist.GradBucket`` / ``torch.futures.Future[torch.Tensor]`` objects.
import logging
import os
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dynamiccl.runtime.core import Runtime, RuntimeConfig
from dynamiccl.runtime.jobcheck import check_job
from dynamiccl.runtime.plugin_control import PluginControl, PluginControlError
from dynamiccl.runtime.tuning import OnlineTuner
from dynamiccl.system.nccl import TUNER_PLUGIN_ENV

log = logging.getLogger(__name__)


def comm_hook(state: Runtime, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``ddp_model.register_comm_hook(runtime, comm_hook)``: the bucket averaged over ranks."""
    return state.hook(bucket)


def start(config: RuntimeConfig | None = None, tuner: OnlineTuner | None = None,
          control: PluginControl | None = None) -> Runtime:
    """The job-start check, then a runtime; every rank calls it right after init_process_group.

    ``control`` defaults to the plugin named by ``NCCL_TUNER_PLUGIN`` when that is set (a plugin
    without the run-time controls is reported and the job runs without them).
    """
    if control is None and os.environ.get(TUNER_PLUGIN_ENV):
        try:
            control = PluginControl()
        except (PluginControlError, OSError) as exc:
            log.warning("dynamiccl runtime: no plugin control, the policy's context stays fixed: %s", exc)
    runtime = Runtime(config, tuner=tuner, control=control)
    check_job(control, runtime.ctrl)
    return runtime


def install(model: DistributedDataParallel, config: RuntimeConfig | None = None,
            tuner: OnlineTuner | None = None, control: PluginControl | None = None) -> Runtime:
    """Registers the runtime's hook on an existing DDP model; returns the runtime."""
    runtime = start(config, tuner, control)
    model.register_comm_hook(runtime, comm_hook)
    return runtime


def ddp(module: torch.nn.Module, config: RuntimeConfig | None = None, tuner: OnlineTuner | None = None,
        control: PluginControl | None = None, **ddp_kwargs: Any) -> DistributedDataParallel:
    """``DistributedDataParallel(module, **ddp_kwargs)`` with the runtime's hook, checked first.

    ``gradient_as_bucket_view`` defaults to True here: with a communication hook registered DDP no
    longer folds the averaging into its copy of the gradients into the bucket, so on gloo the
    hook's division is one more pass over every bucket (any hook's, PyTorch's own included; NCCL
    averages inside its all-reduce); gradients
    that are views of the buckets save DDP's copy back out of the bucket in return, and the copy in
    too where gradients are zeroed rather than set to None (pass ``gradient_as_bucket_view=False``
    for gradients of their own). The runtime is ``model.dynamiccl_runtime`` (its decisions and
    tuning log).
    """
    runtime = start(config, tuner, control)
    ddp_kwargs.setdefault("gradient_as_bucket_view", True)
    model = DistributedDataParallel(module, **ddp_kwargs)
    model.register_comm_hook(runtime, comm_hook)
    model.dynamiccl_runtime = runtime
    return model
