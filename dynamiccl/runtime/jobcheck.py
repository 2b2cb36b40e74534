"""The job-start check: every rank must hold the same policy and plugin, or nothing starts.

Ranks that tune from different policy files choose different algorithms for the same call, and NCCL
then hangs instead of failing. So before the first training collective every rank describes what it
holds — the content hash of ``DYNAMICCL_POLICY`` (SHA-256 of its bytes, the hash the plugin logs), the
plugin's version, the hash of a policy the plugin already loaded, and ``DYNAMICCL_CONTEXT`` — and the
descriptions are all-gathered over a gloo group (CPU; never through the tuner being checked). Any
difference stops the job on every rank with the same error naming the ranks that differ. A rank never
raises before the gather: a local failure (an unreadable file) becomes part of its description, so
the others do not wait for it forever.
"""

from __future__ import annotations

import os
from collections import Counter

import torch.distributed as dist

from dynamiccl.plugin.policy_file import CONTEXT_ENV, POLICY_ENV, file_hash
from dynamiccl.runtime.plugin_control import PluginControl

FIELDS = {"policy": "policy file content (sha256 of DYNAMICCL_POLICY)",
          "plugin_version": "tuner plugin version",
          "loaded_policy": "policy the plugin has loaded",
          "context": "DYNAMICCL_CONTEXT"}


class JobMismatchError(RuntimeError):
    """Ranks hold different policies or plugins; the message names them and the fix."""


def describe(control: PluginControl | None) -> dict[str, str]:
    """What this rank would tune with."""
    path = os.environ.get(POLICY_ENV, "")
    if not path:
        policy = "none"
    else:
        try:
            policy = file_hash(path)
        except OSError as exc:
            policy = f"unreadable ({exc.strerror or exc})"
    return {"policy": policy,
            "plugin_version": control.version() if control is not None else "none",
            "loaded_policy": (control.policy_hash() or "none") if control is not None else "none",
            "context": os.environ.get(CONTEXT_ENV, "")}


def check_job(control: PluginControl | None, group: dist.ProcessGroup | None = None) -> dict[str, str]:
    """All-gathers every rank's :func:`describe` over ``group`` (gloo); raises JobMismatchError on
    every rank when they differ. Returns the agreed description."""
    mine = describe(control)
    everyone: list[dict[str, str] | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    problems = [_differ(field, [e[field] for e in everyone if e is not None]) for field in FIELDS]
    problems = [p for p in problems if p]
    if problems:
        raise JobMismatchError(
            "ranks do not hold the same tuning setup, so they would choose different algorithms and "
            f"NCCL would hang: {'; '.join(problems)}. Give every rank the same policy file (copy it "
            "to each node, or use one shared path), the same plugin build and the same "
            "DYNAMICCL_CONTEXT")
    return mine


def _differ(field: str, values: list[str]) -> str | None:
    counts = Counter(values)
    if len(counts) == 1:
        return None
    common = counts.most_common(1)[0][0]
    odd = [r for r, v in enumerate(values) if v != common]
    odd_values = sorted({values[r] for r in odd})
    return (f"rank{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))} "
            f"{'differ' if len(odd) > 1 else 'differs'} in "
            f"{FIELDS[field]}: {', '.join(_short(v) for v in odd_values)} instead of {_short(common)}")


def _short(value: str) -> str:
    return value[:12] if len(value) == 64 else repr(value) if not value else value
