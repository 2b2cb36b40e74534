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


def _records() -> list[MeasurementRecord]:
    out = []
    for n, factor in RING_FACTOR.items():
        t = _model_time(Scenario(TOPO, Collective.ALLREDUCE, n), DEFAULT)
        for choice, time_us in ((DEFAULT, t), (RING, factor * t)):
            for launch, drift in enumerate((1.0, 1.01)):  # two launches a choice: one is held out
                out.append(MeasurementRecord("allreduce", n, 8, time_us * drift, 1.0, 1.0,
                                             None if choice.is_default else "ring", None, nnodes=1,
                                             launch=f"{choice.label()}-{launch}", source="runner"))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fixtures")
    (root / "replay").mkdir()
    (root / "runner" / "tiny").mkdir(parents=True)
    write_jsonl(_records(), root / "runner" / "tiny" / "sweep.jsonl")
    (root / "runner" / "tiny" / "topology.yaml").write_text(yaml.safe_dump(TOPO.to_dict()))
    systems = bench.datasets(root)
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
