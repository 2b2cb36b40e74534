"""Choices measured side by side (dynamiccl.profiler.measure.interleave): pins call by call inside
a launch, rounds in alternating order, and what the plugin could not force measured in launches of
their own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynamiccl import plugin
from dynamiccl.nccl import Algorithm, Protocol
from dynamiccl.profiler.measure import interleave
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.profiler.measure.runner import CollectiveSpec, summarize
from dynamiccl.runtime.plugin_control import PinCounts

WORKERS = str(Path(__file__).parent / "runtime_workers.py")
TREE_SIMPLE = (int(Algorithm.TREE), int(Protocol.SIMPLE), 0)
RING_LL128_CELL = int(Algorithm.RING) * 3 + int(Protocol.LL128)


def _spec(nbytes: int, algorithm: str | None = None, protocol: str | None = None) -> CollectiveSpec:
    return CollectiveSpec("allreduce", nbytes, "gloo", warmup=1, iters=2, runs=2,
                          algorithm=algorithm, protocol=protocol)


@pytest.mark.multiproc
def test_each_choice_is_pinned_for_its_own_calls_round_after_round_with_a_stand_in_for_nccl(
        tmp_path_factory):
    """Gloo ranks whose every call also asks the plugin as NCCL would (a stand-in: gloo asks no
    tuner), ring/LL128 disabled in the cost table as on a socket network without GPUDirect RDMA."""
    library = str(plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"))
    specs = [_spec(4096), _spec(4096, "tree", "simple"), _spec(4096, "ring", "ll128"),
             _spec(8192, "tree", "simple")]
    for reverse in (False, True):
        out = launch(f"{WORKERS}:interleaved_asking_a_stand_in_nccl", 2,
                     {"specs": specs, "library": library, "reverse": reverse,
                      "disabled": (RING_LL128_CELL,)}, timeout_s=120)
        for rank in out:
            assert rank["shapes"] == [[2, 2, 2]] * 4  # [exec/arrival, round, iteration]
            calls = 2 * (1 + 2)  # per round one untimed call (the first round's warmup) + 2 timed
            assert rank["counts"] == [(0, 0), (calls, 0), (0, calls), (calls, 0)]
            visits = [i for k, (i, _) in enumerate(rank["seen"]) if k % 3 == 0]
            forward = [0, 1, 2, 3]
            assert visits == (forward + forward[::-1] if not reverse else forward[::-1] + forward)
            forced = {i: {d for j, d in rank["seen"] if j == i} for i in range(4)}
            assert forced == {0: {None}, 1: {TREE_SIMPLE}, 2: {None}, 3: {TREE_SIMPLE}}
        why = [interleave._why_not_pinned(replace(s, backend="nccl"), [PinCounts(*r["counts"][i])
                                                                       for r in out])
               for i, s in enumerate(specs)]
        assert why == [None, None, interleave.REFUSED, None]


def test_choices_alternate_between_launch_rounds_and_unpinnable_ones_get_launches_of_their_own(
        monkeypatch):
    """The orchestration alone, with stand-in launches (each returns made-up times at once): the
    first round's interleaved launch finds what cannot be pinned, later rounds put it in a launch
    of its own, first on every other round; every result names its launch."""
    made: list[tuple[str, list[str], bool]] = []

    def result(spec: CollectiveSpec, launch_id: str):
        r = summarize(spec, np.full((2, 2, spec.runs, spec.iters), 100.0))
        r.launch = launch_id
        return r

    def interleaved(specs, nprocs, timeout_s, emulate_hosts, reverse):
        made.append(("interleaved", [s.config_label for s in specs], reverse))
        launch_id = f"L{len(made)}"
        return ([result(s, launch_id) for s in specs],
                [interleave.REFUSED if s.protocol == "ll128" else None for s in specs])

    def own(specs, nprocs, timeout_s, emulate_hosts):
        made.append(("own", [s.config_label for s in specs], False))
        return [result(s, f"L{len(made)}") for s in specs]

    monkeypatch.setattr(interleave, "measure_interleaved", interleaved)
    monkeypatch.setattr(interleave, "measure_many", own)
    specs = [_spec(n, a, p) for a, p in ((None, None), ("tree", "simple"), ("ring", "ll128"))
             for n in (4096, 8192)]
    sweep = interleave.measure_choices([specs] * 3, 2)
    every = ["NCCL default", "tree/simple/auto-ch", "ring/ll128/auto-ch"]
    assert [(kind, labels, reverse) for kind, labels, reverse in made] == [
        ("interleaved", [x for x in every for _ in (1, 2)], False),
        ("own", ["ring/ll128/auto-ch"] * 2, False),
        ("own", ["ring/ll128/auto-ch"] * 2, False),
        ("interleaved", [x for x in every[:2] for _ in (1, 2)], True),
        ("interleaved", [x for x in every[:2] for _ in (1, 2)], False),
        ("own", ["ring/ll128/auto-ch"] * 2, False)]
    assert sweep.own_launch == {"ring/ll128/auto-ch": interleave.REFUSED}
    assert [n.kind for n in sweep.launches] == [k for k, _, _ in made]
    per_choice: dict[str, set[str]] = {}
    for r in sweep.results:
        per_choice.setdefault(r.spec.config_label, set()).add(r.launch)
    assert {label: len(ids) for label, ids in per_choice.items()} == dict.fromkeys(every, 3)
