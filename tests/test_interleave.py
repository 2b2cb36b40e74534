"""Choices measured side by side (dynamiccl.profiler.measure.interleave): pins call by call inside
a launch, rounds in alternating order, and what the plugin could not force measured in launches of
their own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.plugin import build as plugin
from dynamiccl.profiler.measure import interleave
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.profiler.measure.runner import CollectiveSpec, summarize
from dynamiccl.runtime.plugin_control import PinCounts
from dynamiccl.system.nccl import Algorithm, Protocol

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


@pytest.mark.multiproc
def test_plan_run_measures_a_round_as_the_sweep_does_gloo_twin_of_the_gpu_test(tmp_path, capsys):
    """``tune --plan --run``'s measuring (``_run_plan``) on gloo, the CPU twin of its GPU test: the
    round's choices go to one interleaved launch, the one gloo cannot pin to a launch of its own,
    and the round's records are appended to the record file, each naming its launch."""
    from dynamiccl.agents.shipping.tune_measurements import DEFAULT, Choice
    from dynamiccl.agents.shipping.tune_plan import PlannedMeasurement
    from dynamiccl.cli import tune as tune_cli
    from dynamiccl.profiler.formats.records import read_jsonl
    from dynamiccl.system.knobs import Collective

    tree = Choice(Algorithm.TREE, Protocol.SIMPLE)
    planned = [PlannedMeasurement(Collective.ALLREDUCE, 2, choice, 4096, 0.1, "test")
               for choice in (DEFAULT, tree)]
    record = tmp_path / "m.jsonl"
    record.write_text("")  # appended to, as a record file of earlier rounds is
    tune_cli._run_plan(planned, str(record), backend="gloo")
    records = read_jsonl(record)
    assert len(records) == 2 and len({r.launch for r in records}) == 2
    assert all(r.backend == "gloo" and r.launch.startswith("runner-") for r in records)
    captured = capsys.readouterr()
    assert "measured 2 points in 2 launches" in captured.out
    assert "tree/simple/auto-ch in a launch of its own (gloo runs no NCCL" in captured.err
