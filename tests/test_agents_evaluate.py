"""Evaluation: the metrics' definitions, the files and figures, and fidelity to the environment."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from dynamiccl.agents.policies.baselines import OraclePolicy, RandomPolicy
from dynamiccl.agents.policies.registry import load_policy
from dynamiccl.agents.shipping.evaluate import (
    evaluate_policies,
    evaluate_policy,
    oracle_share,
    print_table,
    save_reports,
)
from dynamiccl.agents.shipping.evaluation_plots import plot_reports
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.workloads import load_suite


@pytest.fixture(scope="module")
def suite():
    return load_suite("smoke")


@pytest.fixture(scope="module")
def reports(suite):
    names = ["nccl_default", "oracle", "random", "coordinate_descent", "bandit"]
    return evaluate_policies([load_policy(n) for n in names], suite)


def test_oracle_share_definition_including_the_no_headroom_case():
    assert oracle_share(0.5, 1.0) == 0.5
    assert oracle_share(-0.2, 1.0) == -0.2
    assert math.isnan(oracle_share(0.0, 0.0))
    assert math.isnan(oracle_share(0.0, 1e-9))


def test_reference_policies_score_exactly_zero_and_one(reports, suite):
    by = {r.policy: r for r in reports}
    calls = sum(len(e.scenarios) for e in suite)
    assert by["nccl_default"].oracle_share == 0.0
    assert by["nccl_default"].geomean_speedup == 1.0
    assert by["oracle"].oracle_share == 1.0
    assert by["oracle"].geomean_speedup > 1.0, "the smoke suite must leave room to tune"
    assert all(r.scenarios == calls for r in reports)
    assert by["random"].geomean_speedup < 1.0 < by["oracle"].geomean_speedup
    for r in reports:
        assert r.geomean_speedup <= by["oracle"].geomean_speedup + 1e-12
        assert r.worst_speedup <= r.geomean_speedup
        assert min(c.speedup for c in r.calls) == pytest.approx(r.worst_speedup)


def test_online_tuners_report_calls_to_reach_five_percent_and_what_exploring_cost(reports):
    by = {r.policy: r for r in reports}
    for name in ("coordinate_descent", "bandit"):
        assert by[name].calls_to_5pct is not None and by[name].calls_to_5pct >= 1
        assert 0.0 < by[name].reached_5pct <= 1.0
        assert by[name].exploration_calls > by[name].scenarios / 10
        assert 0 < by[name].exploration_speedup < by["oracle"].geomean_speedup
    assert by["oracle"].calls_to_5pct is None and by["oracle"].exploration_calls is None


def test_every_report_names_its_action_set_and_reality(reports, suite):
    assert {r.action_set for r in reports} == {"deployable actions"}
    assert {r.backend for r in reports} == {"sim"}
    everything = evaluate_policy(load_policy("oracle"), suite, deployable=False)
    assert everything.action_set.startswith("all actions")
    by = {r.policy: r for r in reports}
    assert everything.geomean_speedup >= by["oracle"].geomean_speedup
    assert by["nccl_default"].slower_calls == 0 and by["oracle"].slower_calls == 0
    assert by["random"].slower_calls > 0


def test_summary_files_and_figures_are_written(reports, tmp_path):
    paths = save_reports(reports, tmp_path)
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["policy"] for r in rows] == [r.policy for r in reports]
    data = json.loads(paths["json"].read_text())
    assert data[1]["policy"] == "oracle" and data[1]["oracle_share"] == 1.0
    assert data[0]["calls_to_5pct"] is None
    calls = list(csv.DictReader(paths["calls"].open()))
    assert len(calls) == sum(r.scenarios for r in reports)
    for name, path in plot_reports(reports, tmp_path).items():
        assert path.stat().st_size > 10_000, name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print_table(reports)


class Recorder:
    """Wraps a policy and keeps every observation it was shown."""

    def __init__(self, inner):
        self.inner, self.name, self.seen = inner, inner.name, []

    def act(self, observation, *, scenario=None, action_mask=None):
        self.seen.append(np.array(observation))
        return self.inner.act(observation, scenario=scenario, action_mask=action_mask)


def test_policies_see_exactly_the_observations_the_environment_would_show(suite):
    entry = max(suite, key=lambda e: sum(s.has_straggler for s in e.scenarios))
    assert any(s.has_straggler for s in entry.scenarios)
    recorder = Recorder(RandomPolicy(seed=3))
    evaluate_policy(recorder, [entry])
    env = CollectiveTuningEnv("smoke", deployable=True)
    obs, _ = env.reset(seed=0, options={"episode": entry})
    replay = RandomPolicy(seed=3)
    for seen in recorder.seen:
        np.testing.assert_allclose(seen, obs, atol=1e-6)
        s = env.unwrapped.current_scenario
        obs, *_ = env.step(replay.act(obs, scenario=s, action_mask=env.action_masks()))


def test_a_policy_that_emits_an_invalid_action_is_caught(suite):
    class Broken(OraclePolicy):
        name = "broken"

        def act(self, observation, *, scenario=None, action_mask=None):
            return int(np.flatnonzero(~action_mask)[0])

    with pytest.raises(RuntimeError, match="which the mask forbids"):
        evaluate_policy(Broken(), suite)


@pytest.mark.parametrize("observation", ["deployable", "research"])
def test_a_learned_policy_is_shown_the_observation_set_it_was_trained_on(suite, observation):
    from omegaconf import OmegaConf

    from dynamiccl.agents.policies.sb3_agents import SB3Policy, build_model

    agent = OmegaConf.create({"name": "ppo", "model": {
        "_target_": "stable_baselines3.PPO", "policy": "MlpPolicy", "n_steps": 32, "batch_size": 16,
        "policy_kwargs": {"net_arch": [8]}}})
    env = CollectiveTuningEnv("smoke", observation=observation)
    recorder = Recorder(SB3Policy(build_model(agent, env), "ppo"))
    recorder.observation = recorder.inner.observation
    assert recorder.observation == observation
    report = evaluate_policy(recorder, suite[:1])
    assert report.scenarios == len(recorder.seen)
    assert {s.shape for s in recorder.seen} == {env.observation_space.shape}
