"""The deployable observation: exactly what the tuner plugin knows when NCCL asks it about a call.

A policy that is exported into the C plugin can only use what ``getCollInfo`` hands the plugin per
call (the collective, the exact byte count, the communicator's ranks and nodes, ``numPipeOps``,
``regBuff`` and NCCL's own cost table, hence NCCL's pick), the context slice the runtime selects
(``straggler=… c2c=…``, agreed by every rank), and constants of the deployment fixed when the policy
is exported (the system's tiers, GPU and features). Nothing here needs a timing, a rank id or a
value that differs between ranks, so a policy trained on it is exported without freezing anything.
The research observation (:mod:`dynamiccl.envs.observation`) is the simulator's full state instead.

Every field is scaled into ``[0, 1]`` with fixed bounds; :data:`DEPLOYABLE_FIELDS` is the table the
environment's docstring and Box bounds come from. :func:`encode_batch` encodes many calls of one
system at once (training a full-information learner encodes millions of calls).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import numpy as np

from dynamiccl.envs.observation import SYSTEM_FIELDS, field_table, system_features
from dynamiccl.nccl_model.model import NcclModel
from dynamiccl.nccl_model.select import cost_tables
from dynamiccl.plugin.policy_file import C2C_BUCKETS, STRAGGLER_BUCKETS, context_buckets
from dynamiccl.system.knobs import Collective, Protocol
from dynamiccl.system.nccl import MAX_CHANNELS, NCCL_ALGORITHMS
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

#: log2 of the largest byte count told apart (1 TiB); larger calls share the top of the scale.
LOG2_MAX_BYTES = 40
#: log2 of NCCL's largest channel count and of the largest numPipeOps encoded (64).
LOG2_MAX_CHANNELS = math.log2(MAX_CHANNELS)
LOG2_MAX_PIPE_OPS = 6
#: A cost-table entry is encoded as log2(entry / NCCL's pick) / COST_LOG2_RANGE (0 = NCCL's pick,
#: 1 = 1024x slower or unusable).
COST_LOG2_RANGE = 10.0
#: NCCL's own predicted time of its pick: log10(µs) / 7 (1 µs = 0, 10 s = 1).
LOG10_MAX_US = 7.0
#: log2 of the largest SM count encoded (256).
LOG2_MAX_SMS = 8

_SYSTEM_FIELDS = SYSTEM_FIELDS[2:]  # ranks and nodes are per-call fields here


def _field_specs() -> list[tuple[str, str, float, float]]:
    specs = [(f"collective_{c.name.lower()}", f"1 if the call is {c.name.lower()}", 0.0, 1.0)
             for c in Collective]
    specs += [
        ("log2_bytes", f"log2(1 + nBytes) / {LOG2_MAX_BYTES} (exact size, not a bin)", 0.0, 1.0),
        ("ranks", "log2(nRanks) / 12", 0.0, 1.0),
        ("nodes", "log2(nNodes) / 12", 0.0, 1.0),
        ("num_pipe_ops", f"log2(numPipeOps) / {LOG2_MAX_PIPE_OPS}", 0.0, 1.0),
        ("reg_buff", "1 if the buffers are registered (regBuff)", 0.0, 1.0),
    ]
    specs += [(f"nccl_algorithm_{a.name.lower()}", f"1 if NCCL's own pick is {a.name.lower()}", 0.0, 1.0)
              for a in NCCL_ALGORITHMS]
    specs += [(f"nccl_protocol_{p.name.lower()}", f"1 if NCCL's own pick uses {p.name.lower()}", 0.0, 1.0)
              for p in Protocol]
    specs += [
        ("nccl_channels", f"log2(NCCL's channel count) / {LOG2_MAX_CHANNELS:g}", 0.0, 1.0),
        ("nccl_predicted_us", f"log10(NCCL's predicted µs of its pick) / {LOG10_MAX_US:g}", 0.0, 1.0),
    ]
    specs += [(f"cost_{a.name.lower()}_{p.name.lower()}",
               f"log2(NCCL's cost-table entry / its pick's) / {COST_LOG2_RANGE:g}; 1 = unusable",
               0.0, 1.0) for a in NCCL_ALGORITHMS for p in Protocol]
    specs += [(f"context_straggler_{b}", f"1 if the runtime's context slice says straggler={b}", 0.0, 1.0)
              for b in STRAGGLER_BUCKETS]
    specs += [(f"context_c2c_{b}", f"1 if the runtime's context slice says c2c={b}", 0.0, 1.0)
              for b in C2C_BUCKETS]
    specs += [("sms", f"log2(SM count) / {LOG2_MAX_SMS}", 0.0, 1.0)]
    specs += [(f.name, f"{f.meaning} (a deployment constant)", f.low, f.high) for f in _SYSTEM_FIELDS]
    return specs


DEPLOYABLE_FIELDS, DEPLOYABLE_LOW, DEPLOYABLE_HIGH, _INDEX = field_table(_field_specs())
DEPLOYABLE_SIZE = len(DEPLOYABLE_FIELDS)
_STRAGGLER_BUCKETS = tuple(STRAGGLER_BUCKETS)
_C2C_BUCKETS = tuple(C2C_BUCKETS)


def docstring_table(width: int = 106) -> str:
    """:data:`DEPLOYABLE_FIELDS` as the environment's docstring tables them, ``width`` columns wide
    (its lines stay within 110 indented by 4): one row per field, long meanings continued on rows
    with empty cells."""
    header = "| Num | Field                         | Min | Max | Meaning"
    meaning = width - len(header) - 2
    rows = [header + " " * (meaning - len("Meaning")) + " |",
            "|-----|-------------------------------|-----|-----|" + "-" * (meaning + 2) + "|"]
    for f in DEPLOYABLE_FIELDS:
        cells = [str(f.index), f.name, f"{f.low:g}", f"{f.high:g}"]
        for line in textwrap.wrap(f.meaning, meaning):
            rows.append(f"| {cells[0]:<3} | {cells[1]:<29} | {cells[2]:<3} | {cells[3]:<3} | "
                        f"{line:<{meaning}} |")
            cells = [""] * 4
    return "\n".join(rows)


def _log_unit(x: np.ndarray, scale: float) -> np.ndarray:
    return np.clip(np.log2(np.maximum(x, 1.0)) / scale, 0.0, 1.0)


def encode_batch(topology: Topology, model: NcclModel, collectives: np.ndarray, nbytes: np.ndarray,
                 contexts: Sequence[tuple[str, str]], num_pipe_ops: int = 1,
                 reg_buff: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(observations float32 [B, DEPLOYABLE_SIZE], NCCL's pick as (algorithm, protocol, channels)
    int64 [B, 3]) for B calls on one system; ``model`` is NCCL's model of ``topology``."""
    colls = np.asarray(collectives, dtype=np.int64)
    sizes = np.asarray(nbytes, dtype=np.int64)
    b = len(colls)
    table = cost_tables(model.system, model.tables, colls, sizes, num_pipe_ops=num_pipe_ops)
    algo_c, proto_c, channels, chosen_us = model.choose_many(colls, sizes, num_pipe_ops=num_pipe_ops)
    obs = np.zeros((b, DEPLOYABLE_SIZE), dtype=np.float32)
    obs[np.arange(b), colls] = 1.0
    obs[:, _INDEX["log2_bytes"]] = np.log2(1.0 + sizes) / LOG2_MAX_BYTES
    obs[:, _INDEX["ranks"]] = math.log2(topology.nranks) / 12
    obs[:, _INDEX["nodes"]] = math.log2(topology.nodes) / 12
    obs[:, _INDEX["num_pipe_ops"]] = min(math.log2(num_pipe_ops) / LOG2_MAX_PIPE_OPS, 1.0)
    obs[:, _INDEX["reg_buff"]] = float(reg_buff)
    first_algo = _INDEX[f"nccl_algorithm_{NCCL_ALGORITHMS[0].name.lower()}"]
    first_proto = _INDEX[f"nccl_protocol_{Protocol(0).name.lower()}"]
    obs[np.arange(b), first_algo + algo_c] = 1.0
    obs[np.arange(b), first_proto + proto_c] = 1.0
    obs[:, _INDEX["nccl_channels"]] = np.log2(channels) / LOG2_MAX_CHANNELS
    pick_us = np.maximum(chosen_us.astype(np.float64), 1e-3)
    obs[:, _INDEX["nccl_predicted_us"]] = np.clip(np.log10(np.maximum(pick_us, 1.0)) / LOG10_MAX_US,
                                                  0.0, 1.0)
    ratio = np.where(table >= 0, np.maximum(table, 1e-3) / pick_us[:, None, None], np.inf)
    costs = np.where(np.isfinite(ratio), _log_unit(np.where(np.isfinite(ratio), ratio, 1.0),
                                                   COST_LOG2_RANGE), 1.0)
    first_cost = _INDEX[f"cost_{NCCL_ALGORITHMS[0].name.lower()}_{Protocol(0).name.lower()}"]
    obs[:, first_cost:first_cost + table.shape[1] * table.shape[2]] = costs.reshape(b, -1)
    first_straggler = _INDEX[f"context_straggler_{_STRAGGLER_BUCKETS[0]}"]
    first_c2c = _INDEX[f"context_c2c_{_C2C_BUCKETS[0]}"]
    for i, (straggler, c2c) in enumerate(contexts):
        obs[i, first_straggler + _STRAGGLER_BUCKETS.index(straggler)] = 1.0
        obs[i, first_c2c + _C2C_BUCKETS.index(c2c)] = 1.0
    obs[:, _INDEX["sms"]] = min(math.log2(topology.gpu.sms) / LOG2_MAX_SMS, 1.0)
    obs[:, _INDEX[_SYSTEM_FIELDS[0].name]:] = system_features(topology)[2:]
    return obs, np.stack([algo_c, proto_c, channels], axis=1).astype(np.int64)


def scenario_context(scenario: Scenario, observed_delay_us: float | None = None) -> tuple[str, str]:
    """The context slice the runtime would have agreed for ``scenario``: the straggler delay it
    observed (default: the scenario's own) and the measured compute-to-communication ratio."""
    delay = scenario.straggler_delay_us if scenario.has_straggler else 0.0
    return context_buckets(delay if observed_delay_us is None else observed_delay_us, scenario.c2c)


def encode_deployable(scenario: Scenario, model: NcclModel,
                      context: tuple[str, str] | None = None) -> np.ndarray:
    """One call's deployable observation (float32 [DEPLOYABLE_SIZE])."""
    ctx = scenario_context(scenario) if context is None else context
    obs, _ = encode_batch(scenario.topology, model, np.array([int(scenario.collective)]),
                          np.array([scenario.nbytes]), [ctx])
    return obs[0]


def describe(observation: np.ndarray) -> dict[str, float]:
    """Field name → value, for logs and debugging."""
    return {f.name: float(observation[f.index]) for f in DEPLOYABLE_FIELDS}
