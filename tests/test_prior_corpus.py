"""The learned prior's real corpus (NVIDIA's forced-choice timings as series), its training on them and
its validation on real systems it never learned from, which gates what it may pin in ``tune``."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from dynamiccl.agents.shipping.prior import LearnedPrior
from dynamiccl.agents.shipping.tune import PRIOR_SIGMAS, Tuner
from dynamiccl.agents.shipping.tune_measurements import Measurements
from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource
from dynamiccl.agents.training import prior_agent
from dynamiccl.agents.training.prior_corpus import corpus, load_system
from dynamiccl.agents.training.prior_learner import PriorConfig, PriorLearner, examples
from dynamiccl.agents.training.prior_real_validation import real_cases, validate_real
from dynamiccl.profiler.formats.nccl_topo_timings import read_tree
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario

NVIDIA = Path(__file__).parent / "fixtures" / "real" / "nvidia"
DGX2V = str(NVIDIA / "dgx2v_v100_ib")
DGX1V = str(NVIDIA / "dgx1v_v100_ib")


def test_a_real_series_holds_nvidias_measured_ratios_where_both_were_timed_and_nothing_else():
    series = corpus([DGX2V])
    assert {(s.collective, s.nranks) for s in series} == {(Collective.ALLREDUCE, 16),
                                                         (Collective.ALLREDUCE, 32)}
    records = read_tree(Path(DGX2V) / "data")
    default = {(r.nranks, r.nbytes): r.time_us for r in records if r.algorithm is None}
    forced = {(r.nranks, r.algorithm, r.protocol, r.nbytes): r.time_us for r in records
              if r.algorithm is not None}
    checked = 0
    for s in series:
        sizes = [round(2 ** x) for x in s.log2_sizes]
        for i, (algorithm, protocol) in enumerate(s.pairs):
            for j, nbytes in enumerate(sizes):
                timed = forced.get((s.nranks, algorithm.name.lower(), protocol.name.lower(), nbytes))
                if timed is None or (s.nranks, nbytes) not in default:
                    assert np.isnan(s.truth[i, j]), "a ratio nobody timed is not invented"
                    continue
                if np.isfinite(s.truth[i, j]):
                    assert s.truth[i, j] == pytest.approx(math.log(timed / default[(s.nranks, nbytes)]))
                    checked += 1
        assert s.noise > 0 and s.asked.any()
    assert checked > 100


def test_a_real_series_is_read_as_tune_asks_its_prior():
    records, topology = load_system(DGX2V)
    tuner = Tuner(topology, Measurements(list(records)))
    series = next(s for s in corpus([DGX2V]) if s.nranks == 16)
    query = tuner.prior_query(Scenario(topology.resized(nodes=1, gpus_per_node=16),
                                       Collective.ALLREDUCE, 8))
    model_us, measured = LearnedPriorSource.points(query)
    assert series.noise == LearnedPriorSource.noise(query)
    assert len(measured) == int(np.isfinite(series.truth).sum())


def test_a_folder_that_is_no_real_system_and_a_system_both_trained_and_validated_on_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no topology\.yaml; a real system"):
        load_system(tmp_path)
    (tmp_path / "topology.yaml").write_text((Path(DGX2V) / "topology.yaml").read_text())
    with pytest.raises(ValueError, match="no measurements"):
        load_system(tmp_path)
    with pytest.raises(ValueError, match="dgx2v_v100_ib is both in real_train and real_validation"):
        PriorConfig(real_train=[DGX2V, DGX1V], real_validation=[DGX2V])


def test_the_learner_learns_real_residuals_only_where_they_were_measured():
    s = corpus([DGX2V])[0]
    x, y = examples(np.random.default_rng(0), s, budgets=16, queries=64)
    assert len(y) > 0 and np.isfinite(x).all() and np.isfinite(y).all()
    known = (s.truth - s.model)[s.known]
    assert set(np.round(y, 6)) <= set(np.round(known, 6)), "every target is a measured residual"
    with_real = PriorLearner(PriorConfig(systems_per_round=1, real_train=[DGX2V], real_series_per_round=4))
    without = PriorLearner(PriorConfig(systems_per_round=1))
    assert len(with_real.draw_round()[1]) > len(without.draw_round()[1])


def test_validation_on_a_held_out_real_system_is_seeded_and_sets_the_gate_tune_applies():
    assert [c.measured.tolist() for c in real_cases([DGX1V])] == \
        [c.measured.tolist() for c in real_cases([DGX1V])]
    shipped = LearnedPrior.load()
    found = validate_real(shipped, [DGX1V])
    assert found["systems"] == ["dgx1v_v100_ib"] and found["val_points"] > 0
    assert 0 <= found["val_cover_1sigma"] <= found["val_cover_2sigma"] <= 1
    assert validate_real(shipped, []) == {}

    def widened(gate: float) -> LearnedPriorSource:
        return LearnedPriorSource(replace(shipped, meta={**shipped.meta,
                                                         "real_validation": {"gate_sigmas": gate}}))

    assert LearnedPriorSource(shipped).widen == 1.0, "a file without real validation is read as before"
    assert widened(PRIOR_SIGMAS / 2).widen == 1.0, "never narrower than tune's own gate"
    assert widened(2 * PRIOR_SIGMAS).widen == pytest.approx(2.0)

    records, topology = load_system(DGX1V)
    first = records[0]
    query = Tuner(topology, Measurements(list(records))).prior_query(Scenario(
        topology.resized(nodes=first.nnodes, gpus_per_node=first.nranks // first.nnodes),
        Collective(first.coll), first.nbytes))
    plain, wide = LearnedPriorSource(shipped).estimate(query), widened(2 * PRIOR_SIGMAS).estimate(query)
    assert plain.keys() == wide.keys() and plain
    assert all(wide[k] == pytest.approx((plain[k][0], 2 * plain[k][1])) for k in plain)
    assert widened(math.nan).estimate(query) == {}, "validation that checked no gain: it pins nothing"


def test_a_run_with_real_systems_records_a_command_that_trains_it_again():
    overrides = ["agent=learned_prior", f"agent.model.real_train=[{DGX2V}]",
                 f"agent.model.real_validation=[{DGX1V}]"]
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
        command = prior_agent.AGENT.training_command(cfg)
        again = compose("train", overrides=command.split()[2:])
    assert f"agent.model.real_train=[{DGX2V}]" in command
    build = prior_agent.AGENT.build
    assert build(again.agent, seed=0).config == build(cfg.agent, seed=0).config
