"""Workload traces: the collectives one training iteration issues, in the order it issues them.

A workload file (``configs/workload/*.yaml``) describes a parallelism scheme and a model; the trace
is derived here with the rules the frameworks follow, so the sizes can be checked against the model
card rather than trusted as magic numbers:

* ``ddp`` – PyTorch DistributedDataParallel: gradients are all-reduced in buckets, the first one
  capped at ``first_bucket_cap`` (PyTorch's default 1 MiB), the rest at ``bucket_cap`` (25 MiB), the
  remainder in a last, smaller bucket.
* ``fsdp`` – fully sharded data parallel (FULL_SHARD): each unit's parameters are all-gathered in the
  forward pass and again in the backward pass, and its gradients reduce-scattered right after.
* ``tensor_parallel`` – Megatron-style: two all-reduces of the activations (batch × sequence ×
  hidden elements) per layer forward and two backward; it runs inside one node (``group: node``).
* ``trace`` – an explicit list of calls, for anything else.

Sizes follow nccl-tests (and :class:`dynamiccl.system.scenario.Scenario`): for all-gather and
reduce-scatter the whole gathered buffer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from dynamiccl.config_loader import ConfigError, read_config
from dynamiccl.envs.config_files import check_keys, integer, number
from dynamiccl.system.knobs import parse_enum
from dynamiccl.system.nccl import Collective
from dynamiccl.system.units import parse_size

GROUPS = ("world", "node")
_COMMON = {"name", "description", "kind", "group"}
_KIND_KEYS = {
    "ddp": {"params", "dtype_bytes", "bucket_cap", "first_bucket_cap"},
    "fsdp": {"units", "dtype_bytes", "reduce_dtype_bytes"},
    "tensor_parallel": {"layers", "micro_batch", "seq_len", "hidden", "dtype_bytes",
                        "micro_batches", "backward"},
    "trace": {"calls"},
}


@dataclass(frozen=True)
class Workload:
    """The calls of one iteration; ``group`` says whether they span all ranks or one node."""

    name: str
    calls: tuple[tuple[Collective, int], ...]
    group: str = "world"
    description: str = ""

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self) -> Iterator[tuple[Collective, int]]:
        return iter(self.calls)


def _size(data: Mapping[str, Any], key: str, source: str, default: str | None,
          where: str = "") -> int:
    if data.get(key, default) is None:
        raise ConfigError(f"{source}: '{where}{key}' is missing; write a size like 25MiB")
    try:
        size = parse_size(data.get(key, default))
    except ValueError as exc:
        raise ConfigError(f"{source}: '{where}{key}': {exc}") from None
    if size < 1:
        raise ConfigError(f"{source}: '{where}{key}' must be at least one byte")
    return size


def _ddp(data: Mapping[str, Any], source: str) -> list[tuple[Collective, int]]:
    total = int(number(data, "params", source, low=1)) * integer(data, "dtype_bytes", source, 2)
    first = min(_size(data, "first_bucket_cap", source, "1MiB"), total)
    cap = _size(data, "bucket_cap", source, "25MiB")
    full, tail = divmod(total - first, cap)
    sizes = [first] + [cap] * full + ([tail] if tail else [])
    return [(Collective.ALLREDUCE, n) for n in sizes]


def _fsdp(data: Mapping[str, Any], source: str) -> list[tuple[Collective, int]]:
    dtype = integer(data, "dtype_bytes", source, 2)
    reduce_dtype = integer(data, "reduce_dtype_bytes", source, dtype)
    units = data.get("units")
    if not isinstance(units, list) or not units:
        raise ConfigError(f"{source}: 'units' must be a list like [{{params: 202383360, repeat: 32}}]")
    params: list[int] = []
    for i, unit in enumerate(units):
        where = f"units[{i}]."
        if not isinstance(unit, Mapping):
            raise ConfigError(f"{source}: '{where[:-1]}' must be a mapping with params and repeat")
        check_keys(unit, {"name", "params", "repeat"}, where, source)
        count = int(number(unit, "params", source, low=1, where=where))
        params += [count] * integer(unit, "repeat", source, 1, where=where)
    forward = [(Collective.ALLGATHER, p * dtype) for p in params]
    backward = [call for p in reversed(params)
                for call in ((Collective.ALLGATHER, p * dtype),
                             (Collective.REDUCESCATTER, p * reduce_dtype))]
    return forward + backward


def _tensor_parallel(data: Mapping[str, Any], source: str) -> list[tuple[Collective, int]]:
    elements = (integer(data, "micro_batch", source, 1) * integer(data, "seq_len", source)
                * integer(data, "hidden", source))
    size = elements * integer(data, "dtype_bytes", source, 2)
    passes = 2 if data.get("backward", True) else 1
    count = 2 * passes * integer(data, "layers", source) * integer(data, "micro_batches", source, 1)
    return [(Collective.ALLREDUCE, size)] * count


def _trace(data: Mapping[str, Any], source: str) -> list[tuple[Collective, int]]:
    calls = data.get("calls")
    if not isinstance(calls, list) or not calls:
        raise ConfigError(f"{source}: 'calls' must be a list like [{{collective: allreduce, "
                          "bytes: 25MiB, repeat: 4}}]")
    out: list[tuple[Collective, int]] = []
    for i, call in enumerate(calls):
        where = f"calls[{i}]."
        if not isinstance(call, Mapping):
            raise ConfigError(f"{source}: '{where[:-1]}' must be a mapping")
        check_keys(call, {"collective", "bytes", "repeat"}, where, source)
        try:
            collective = Collective(parse_enum(Collective, call.get("collective", "")))
        except ValueError as exc:
            raise ConfigError(f"{source}: '{where}collective': {exc}") from None
        size = _size(call, "bytes", source, None, where)
        out += [(collective, size)] * integer(call, "repeat", source, 1, where=where)
    return out


_GENERATORS = {"ddp": _ddp, "fsdp": _fsdp, "tensor_parallel": _tensor_parallel, "trace": _trace}


def workload_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> Workload:
    """Validates a workload document and derives its trace; errors name ``source`` and the key."""
    kind = data.get("kind")
    if kind not in _GENERATORS:
        raise ConfigError(f"{source}: 'kind' is {kind!r}; use one of {', '.join(_GENERATORS)}")
    check_keys(data, _COMMON | _KIND_KEYS[kind], "", source)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: 'name' is missing; give the workload a name")
    group = data.get("group", "node" if kind == "tensor_parallel" else "world")
    if group not in GROUPS:
        raise ConfigError(f"{source}: 'group' is {group!r}; use world (all ranks) or node")
    calls = _GENERATORS[kind](data, source)
    return Workload(name, tuple(calls), group, str(data.get("description", "")).strip())


@lru_cache(maxsize=128)
def _load_named(spec: str) -> Workload:
    return workload_from_dict(*read_config("workload", spec))


def load_workload(spec: str | Path | Mapping[str, Any]) -> Workload:
    """A workload by name (``configs/workload/<name>.yaml``), by path, or from a mapping."""
    if isinstance(spec, Mapping):
        return workload_from_dict(*read_config("workload", spec))
    return _load_named(str(spec))
