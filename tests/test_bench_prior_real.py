"""``experiments/bench_prior_real.py``: tune with and without the learned prior, scored on the sizes
and launches it did not see, on a tiny dataset of runner records whose answer is known."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import yaml

from dynamiccl.agents.shipping.tune import DEFAULT, PRIOR_SIGMAS, PriorQuery, _model_time
from dynamiccl.agents.shipping.tune_measurements import Choice
from dynamiccl.profiler.formats.records import MeasurementRecord, write_jsonl
from dynamiccl.system.knobs import Algorithm, Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import bench_prior_real as bench  # noqa: E402

TOPO = load_topology("dgx_h100", nodes=1)
RING = Choice(Algorithm.RING, None)
#: NCCL_ALGO=RING against NCCL's default: slower at every size tune sees (1, 4, 16 MiB kept of the
#: six), 0.6x at 2 and 8 MiB, 1.2x at 32 MiB (held out): tune's own sources say "keep NCCL".
RING_FACTOR = {1 << 20: 1.1, 1 << 21: 0.6, 1 << 22: 1.1, 1 << 23: 0.6, 1 << 24: 1.1, 1 << 25: 1.2}


class Knowing:
    """A prior for the test that knows the planted factors (and is sure of them), at every pair
    NCCL's ring runs."""

    def estimate(self, query: PriorQuery) -> dict:
        return {(c, n): (math.log(RING_FACTOR[n]) if c.algorithm == Algorithm.RING else 1.0, 0.01)
                for n in query.sizes if n in RING_FACTOR for c in query.choices}


def _records(ring_factor: dict[int, float] = RING_FACTOR) -> list[MeasurementRecord]:
    out = []
    for n, factor in ring_factor.items():
        t = _model_time(Scenario(TOPO, Collective.ALLREDUCE, n), DEFAULT)
        for choice, time_us in ((DEFAULT, t), (RING, factor * t)):
            for launch, drift in enumerate((1.0, 1.01)):  # two launches a choice: one is held out
                out.append(MeasurementRecord("allreduce", n, 8, time_us * drift, 1.0, 1.0,
                                             None if choice.is_default else "ring", None, nnodes=1,
                                             launch=f"{choice.label()}-{launch}", source="runner"))
    return out


def _tiny_systems(root: Path, ring_factor: dict[int, float] = RING_FACTOR) -> list:
    (root / "replay").mkdir()
    (root / "runner" / "tiny").mkdir(parents=True)
    write_jsonl(_records(ring_factor), root / "runner" / "tiny" / "sweep.jsonl")
    (root / "runner" / "tiny" / "topology.yaml").write_text(yaml.safe_dump(TOPO.to_dict()))
    return bench.datasets(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    systems = _tiny_systems(tmp_path_factory.mktemp("fixtures"))
    assert [s.name for s in systems] == ["tiny"] and systems[0].splits == 2
    return bench.summarise(bench.run(systems, Knowing(), draws=1))["tiny"]


def test_the_prior_is_scored_on_the_held_out_sizes_and_launches_only(tiny):
    every = tiny[bench.EVERY_OTHER]
    assert every["realities"] == 2 and every["uncalibrated"] == 0  # two launch splits, fitted
    tuners = every["tuners"]
    assert tuners["tune"]["decisions"] == tuners["no_prior"]["decisions"] == 3 * 2  # 2, 8, 32 MiB
    assert tuners["no_prior"]["share"] == 0.0 and every["open_to_prior"] == 1.0
    assert tuners["tune"]["share"] == pytest.approx(1.0) and every["prior_adds"] == pytest.approx(1.0)
    assert tuners["tune"]["slower_3pct"] == 0 and every["prior_overrides"] == 4
    assert every["prior_alone"][f"{PRIOR_SIGMAS:g} sigma"] == {"pins": 4, "slower_3pct": 0, "share": 1.0}
    assert every["headroom_per_decision"] == pytest.approx((1 / 0.6) ** (2 / 3) - 1, abs=0.01)
    listed = [d for d in every["decisions"] if d["tuner"] == "tune"]
    assert {(d["nbytes"], d["chosen"], d["evidence"], d["times"]) for d in listed} == {
        (1 << 21, RING.label(), "learned prior", 2), (1 << 23, RING.label(), "learned prior", 2)}
    for d in listed:  # the gain on the scoring launch: 1/0.6 - 1, or 1.01/0.606 - 1 on the second
        assert d["predicted_gain"] == pytest.approx(1 / 0.6 - 1, abs=0.01)
        assert d["realised_gain"] == pytest.approx(1 / 0.6 - 1, abs=0.01)


def test_coverage_counts_the_priors_answers_against_the_scoring_timings(tiny):
    """The planted prior is right within 1 % at every held-out point it answers (sigma 0.01):
    every point within 2 sigmas, the median error the launches' 1 % drift at most."""
    cover = tiny[bench.EVERY_OTHER]["coverage"]
    assert cover["points"] == 3 * 2 and cover["cover_2sigma"] == 1.0
    assert cover["median_abs_error"] <= 0.011 and cover["median_sigma"] == pytest.approx(0.01)
    assert tiny[bench.RANDOM_HALF]["tuners"]["tune"]["decisions"] == 3 * 2


def test_explain_lists_the_decisions_where_tune_and_a_rule_differ_with_what_each_read(tmp_path):
    """Ring faster at every size tune sees (x0.85 at 1 and 4 MiB, x0.9 at 16 MiB), 0.6x at 2 and
    8 MiB, 1.2x at 32 MiB: the sweep holds ring past 16 MiB and loses 1/6 there, which tune does
    not (a gain shrinking towards the last measured size is not carried past it); between
    measured sizes both pin ring alike, so no other row. The rows' points sum to the gap."""
    planted = {1 << 20: 0.85, 1 << 21: 0.6, 1 << 22: 0.85, 1 << 23: 0.6, 1 << 24: 0.9, 1 << 25: 1.2}
    doc = bench.explain(_tiny_systems(tmp_path, planted)[0], draws=1)
    rows = doc[bench.EVERY_OTHER]["decisions"]
    assert {(r["unit"], r["rule"], r["nbytes"]) for r in rows} == {
        (f"split {k}", "sweep_noise_gate", 1 << 25) for k in range(2)}
    for r in rows:
        assert (r["rule_chose"], r["tune_chose"]) == (RING.label(), "NCCL default")
        assert r["rule_gain"] == pytest.approx(1 / 1.2 - 1, abs=0.01) and r["tune_gain"] == 0.0
        assert r["rule_saw"] == "+11.1% at 16MiB" and r["tune_judged"] == RING.label()
        assert r["share_points"] < 0 and not r["beyond_noise"]
    gap = doc[bench.EVERY_OTHER]["gap"]
    assert gap["sweep_noise_gate"]["share_points"] == pytest.approx(
        sum(r["share_points"] for r in rows), abs=1e-3)
    assert gap["neighbour_rule"] == {"share_points": 0, "beyond_noise_points": 0}


class _Shown:
    """A reality showing one launch per choice at ``kept`` sizes of one all-reduce series: NCCL's
    default at 100 µs and each choice at its factor of it."""

    def __init__(self, factors: dict[int, dict[Choice, float]], kept: set[int]) -> None:
        self.factors = factors
        self.scenarios = [Scenario(TOPO, Collective.ALLREDUCE, n) for n in sorted(factors)]
        self.kept = [s for s in self.scenarios if s.nbytes in kept]

    def menu(self, s: Scenario) -> list[Choice]:
        return [DEFAULT, *self.factors[s.nbytes]]

    def launch_cap(self, s: Scenario, choice: Choice) -> int:
        return int(s in self.kept)

    def measure(self, s: Scenario, choice: Choice, nth: int = 0) -> float:
        return 100.0 * (1.0 if choice.is_default else self.factors[s.nbytes][choice])


def test_the_simple_rules_are_the_ones_a_user_writes_by_hand():
    """The sweep pins the fastest measured choice where it beats NCCL's default by 3 % and holds it
    up to the next measured size; the neighbour rule pins, between two measured sizes, the choice
    that beat NCCL's default by 3 % at both (of several, the one whose smaller gain is largest)."""
    from bench_tuning import neighbour_rule, sweep_noise_gate

    tree = Choice(Algorithm.TREE, None)
    factors = {1 << 20: {RING: 0.90, tree: 0.95}, 1 << 21: {RING: 1.5, tree: 0.9},
               1 << 22: {RING: 0.96, tree: 0.92}, 1 << 23: {RING: 0.9, tree: 0.9},
               1 << 24: {RING: 0.99, tree: 1.1}}
    reality = _Shown(factors, {1 << 20, 1 << 22, 1 << 24})
    sweep = sweep_noise_gate()(reality)[0]
    near = neighbour_rule()(reality)[0]
    by_size = {s.nbytes: (sweep[s], near[s]) for s in reality.scenarios}
    assert by_size[1 << 20] == (RING, RING) and by_size[1 << 22] == (tree, tree)
    assert by_size[1 << 21] == (RING, tree)  # the rule below / beat NCCL at 1 and 4 MiB: tree
    assert by_size[1 << 23] == (tree, DEFAULT)  # nothing beat NCCL by 3 % at 16 MiB
    assert by_size[1 << 24] == (DEFAULT, DEFAULT)


def test_the_beyond_noise_share_counts_decisions_whose_headroom_is_5_percent_or_more():
    from bench_tuning import Score

    score = Score()
    score.add("a", 100.0, 80.0, 80.0)  # 25 % headroom, all of it taken
    score.add("b", 100.0, 98.0, 100.0)  # 2 % headroom: noise, not counted beyond it
    score.add("c", 100.0, 90.0, 103.0)  # 11 % headroom, a decision 3 % slower
    summary = score.summary()
    assert summary["beyond_noise_decisions"] == 2
    assert summary["beyond_noise_share"] == pytest.approx(
        (math.log(100 / 80) + math.log(100 / 103)) / (math.log(100 / 80) + math.log(100 / 90)),
        abs=1e-4)
    assert summary["headroom_share"] < summary["beyond_noise_share"] and summary["slower_2pct"] == 1
