"""Choices of a collective measured side by side: interleaved call by call inside a launch, over
several launches.

Why: NCCL reads ``NCCL_ALGO``/``NCCL_PROTO`` once per communicator, so forcing a choice through the
environment costs a launch per choice, and launches of the same call differ far more than runs
inside one (on one H200 with four emulated hosts: 13–46 % between launches, 1–2 % inside one). A
choice timed in a launch of its own is compared with launch noise. The tuner plugin decides per
call instead: in one launch (:func:`measure_interleaved`) every choice is pinned in turn at its
size (``dynamiccl_pin``) for ``iters`` calls, round after round, the order reversed every other
round, so each choice's timings share the launch's state with its neighbours'. A round is one run
of every choice; a choice's time is the median over rounds (a stray round does not move it).

A choice counts as measured only where the plugin forced every call of it on every rank
(``dynamiccl_pin_counts``). NCCL's default needs no pin. What the plugin cannot force is measured
in a launch of its own with the NCCL environment naming it (:func:`~.runner.measure_many`, where
only the measured collective runs under the forcing): a choice NCCL disables on the system (its
cost-table cell arrives disabled, as LL128 on a socket network without GPUDirect RDMA; NCCL
honours a protocol named explicitly in ``NCCL_PROTO``, ``src/graph/tuning.cc``), a choice leaving
the algorithm or protocol open (a pin names both), a one-rank communicator (NCCL never asks a
tuner) and gloo (no NCCL: there the pins run the plugin's code in the rank and nothing reads them).
A choice naming a knob NCCL has no variable for (a chunk size: only the plugin sets it, NCCL 2.30.3
and later) is measured interleaved or not at all (:attr:`ChoiceSweep.not_measured`).

:func:`measure_choices` runs both in rounds of launches, in alternating order (the interleaved launch
first, then each choice of its own; the next round the other way round). Every result
carries its launch's id, which is what ``dynamiccl tune`` counts as launches.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dynamiccl.profiler.measure import emulation
from dynamiccl.profiler.measure.launcher import RankContext, launch
from dynamiccl.profiler.measure.runner import (
    STEERING_ENV,
    CollectiveResult,
    CollectiveSpec,
    call_bytes,
    collective_op,
    gpu_name,
    join_group,
    measure_many,
    rank_environment,
    summarize,
    timed_iterations,
)
from dynamiccl.runtime.plugin_control import Pin, PinCounts, PluginControl
from dynamiccl.system.nccl import TUNER_PLUGIN_ENV, Collective

#: Why a choice was not measured interleaved, by what the plugin's counts said.
NOT_ASKED = "the plugin was never asked (NCCL did not consult a tuner for it)"
REFUSED = "NCCL has it disabled here (its cost-table cell arrives disabled)"
OPEN = "its algorithm or protocol is left to NCCL (a pin names both)"
NO_NCCL = "gloo runs no NCCL: nothing reads a pin"


@dataclass(frozen=True)
class LaunchNote:
    """One launch of a sweep: its id, ``interleaved`` or ``own`` (a choice forced through the
    environment), the configurations it measured and how long it took."""

    launch: str
    kind: str
    configs: tuple[str, ...]
    seconds: float


@dataclass
class ChoiceSweep:
    """Every result of :func:`measure_choices`, in launch order, and how it was measured."""

    results: list[CollectiveResult] = field(default_factory=list)
    launches: list[LaunchNote] = field(default_factory=list)
    #: Configurations measured in launches of their own, and why the plugin could not pin them.
    own_launch: dict[str, str] = field(default_factory=dict)
    #: Configurations the plugin could not pin that no NCCL variable forces either (a chunk size),
    #: and why: not measured.
    not_measured: dict[str, str] = field(default_factory=dict)


def pinnable(spec: CollectiveSpec) -> bool:
    """A pin names an algorithm and a protocol NCCL has (channels optional)."""
    return spec.algorithm is not None and spec.protocol is not None


def measure_interleaved(specs: list[CollectiveSpec], nprocs: int, timeout_s: float = 120.0,
                        emulate_hosts: bool = False, reverse: bool = False
                        ) -> tuple[list[CollectiveResult], list[str | None]]:
    """One launch timing ``specs`` (one backend, the same ``runs``: the rounds) call by call, each
    choice pinned through the plugin in turn (see the module docstring); ``reverse`` starts its
    first round from the last spec. Returns a result per spec and, per spec, None where it ran as
    labelled, else why not (then its result timed NCCL's own choice and must not be kept)."""
    backend = specs[0].backend
    if any(s.backend != backend or s.runs != specs[0].runs for s in specs):
        raise ValueError("an interleaved launch measures one backend, every spec in the same rounds")
    from dynamiccl.plugin import build as plugin
    nccl = backend == "nccl"
    if nccl:
        emulation.check_placement(nprocs, emulation.visible_gpus(), emulate_hosts)
    library = str(plugin.library_path())
    plugin_env = {TUNER_PLUGIN_ENV: library}
    env = rank_environment(backend, {**dict.fromkeys(STEERING_ENV), **plugin_env})
    per_rank = launch("dynamiccl.profiler.measure.interleave:rank_interleaved", nprocs,
                      {"specs": specs, "library": library, "reverse": reverse},
                      timeout_s=timeout_s, env=env, emulate_hosts=emulate_hosts and nccl)
    launch_id = f"runner-{uuid.uuid4().hex[:12]}"
    results, why_not = [], []
    for i, spec in enumerate(specs):
        result = summarize(spec, np.stack([times[i] for times, _, _ in per_rank]),
                           emulated_hosts=emulate_hosts and nccl)
        result.launch, result.gpu, result.env = launch_id, per_rank[0][1], plugin_env
        results.append(result)
        why_not.append(_why_not_pinned(spec, [PinCounts(*counts[i]) for _, _, counts in per_rank]))
    return results, why_not


def _why_not_pinned(spec: CollectiveSpec, counts: list[PinCounts]) -> str | None:
    if spec.knobs.is_default:
        return None  # NCCL's default: nothing to pin
    if spec.backend != "nccl":
        return NO_NCCL
    if not pinnable(spec):
        return OPEN
    if any(c.refused for c in counts):
        return REFUSED
    if any(c.forced == 0 for c in counts):
        return NOT_ASKED
    return None


def rank_interleaved(ctx: RankContext, specs: list[CollectiveSpec], library: str, reverse: bool
                     ) -> tuple[list[np.ndarray], str, list[tuple[int, int]]]:
    """Launcher entry: per spec this rank's ``[2, round, iteration]`` times, the GPU's model, and
    the plugin's (forced, refused) counts over the spec's calls."""
    import torch.distributed as dist

    device, ctrl = join_group(ctx, specs[0].backend)
    control = PluginControl(Path(library))
    try:
        ops = [collective_op(spec, device) for spec in specs]
        world = dist.get_world_size()
        times = [np.zeros((2, spec.runs, spec.iters)) for spec in specs]
        counts = [PinCounts() for _ in specs]
        order = list(range(len(specs)))
        for r in range(specs[0].runs):
            forward = (r % 2 == 0) != reverse
            for i in order if forward else order[::-1]:
                spec = specs[i]
                _pin(control, spec, world)
                before = control.pin_counts()
                # the first visit warms the choice up (NCCL connects an algorithm on first use);
                # one untimed call after each switch on later rounds
                times[i][:, r] = timed_iterations(ops[i], spec, device, ctrl,
                                                  spec.warmup if r == 0 else min(spec.warmup, 1))
                got = control.pin_counts() - before
                counts[i] = PinCounts(counts[i].forced + got.forced, counts[i].refused + got.refused)
            _pin(control, None, world)
    finally:
        dist.destroy_process_group()
    return times, gpu_name(device), [(c.forced, c.refused) for c in counts]


def _pin(control: PluginControl, spec: CollectiveSpec | None, world: int) -> None:
    """Pins ``spec``'s choice at its size and nothing else (every rank pins the same, in the same
    order); None or NCCL's default: nothing pinned."""
    for coll in Collective:
        control.unpin(int(coll), 0, 2**64 - 1)
    if spec is None or not pinnable(spec):
        return
    nbytes = call_bytes(spec, world)
    control.pin(Pin(int(spec.coll), nbytes, nbytes + 1, spec.knobs))


def measure_choices(rounds: Sequence[list[CollectiveSpec]], nprocs: int, timeout_s: float = 120.0,
                    emulate_hosts: bool = False, progress: Callable[[str], Any] | None = None,
                    round_done: Callable[[list[CollectiveResult]], Any] | None = None
                    ) -> ChoiceSweep:
    """Each round's specs (a choice at a size each) measured in one round of launches: the
    pinnable ones interleaved in one launch, every other choice in a launch of its own, the order
    alternating from round to round (see the module docstring); a choice found unpinnable in one
    round has launches of its own from then on. ``round_done`` gets each round's results as soon
    as the round ends."""
    sweep = ChoiceSweep()
    say = progress or (lambda _: None)
    for k, specs in enumerate(rounds):
        before = len(sweep.results)
        where = f"[round {k + 1}/{len(rounds)}]"
        for step in ("interleaved", "own") if k % 2 == 0 else ("own", "interleaved"):
            if step == "interleaved":
                together = [s for s in specs if s.config_label not in sweep.own_launch
                            and s.config_label not in sweep.not_measured]
                if together:
                    _interleaved(sweep, together, nprocs, timeout_s, emulate_hosts, k % 2 == 1)
                    say(f"{where} interleaved launch of {len(sweep.launches[-1].configs)} "
                        f"configurations: {sweep.launches[-1].seconds:.0f} s")
                continue
            for label in dict.fromkeys(s.config_label for s in specs):
                if label in sweep.own_launch:
                    _own(sweep, [s for s in specs if s.config_label == label], nprocs, timeout_s,
                         emulate_hosts)
                    say(f"{where} {label} in a launch of its own ({sweep.own_launch[label]}): "
                        f"{sweep.launches[-1].seconds:.0f} s")
        if round_done is not None:
            round_done(sweep.results[before:])
    return sweep


def _interleaved(sweep: ChoiceSweep, specs: list[CollectiveSpec], nprocs: int, timeout_s: float,
                 emulate_hosts: bool, reverse: bool) -> None:
    began = time.monotonic()
    results, why_not = measure_interleaved(specs, nprocs, timeout_s, emulate_hosts, reverse)
    for spec, result, why in zip(specs, results, why_not, strict=True):
        if why is None:
            sweep.results.append(result)
        elif spec.knobs.unforceable():
            sweep.not_measured.setdefault(spec.config_label, why)
        else:
            sweep.own_launch.setdefault(spec.config_label, why)
    sweep.launches.append(LaunchNote(results[0].launch, "interleaved",
                                     tuple(dict.fromkeys(s.config_label for s in specs)),
                                     round(time.monotonic() - began, 1)))


def _own(sweep: ChoiceSweep, specs: list[CollectiveSpec], nprocs: int, timeout_s: float,
         emulate_hosts: bool) -> None:
    began = time.monotonic()
    results = measure_many(specs, nprocs, timeout_s, emulate_hosts)
    sweep.results += results
    sweep.launches.append(LaunchNote(results[0].launch, "own", (specs[0].config_label,),
                                     round(time.monotonic() - began, 1)))
