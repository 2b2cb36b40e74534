"""The deployable observation (issue 12): only what the tuner plugin sees, nothing it cannot."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from dynamiccl import decisions
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.deployable_observation import (
    DEPLOYABLE_FIELDS,
    DEPLOYABLE_SIZE,
    NCCL_ALGORITHMS,
    describe,
    encode_batch,
    encode_deployable,
    scenario_context,
)
from dynamiccl.system.knobs import Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

H100X2 = load_topology("dgx_h100", nodes=2)
MODEL = decisions.nccl_model_for(H100X2)


def _obs(scenario: Scenario) -> np.ndarray:
    return encode_deployable(scenario, decisions.nccl_model_for(scenario.topology))


@pytest.mark.parametrize("nbytes", [8, 4096, 1 << 20, 1 << 30])
@pytest.mark.parametrize("collective", [Collective.ALLREDUCE, Collective.ALLGATHER])
def test_nccl_pick_fields_are_the_pick_nccl_makes(collective: Collective, nbytes: int) -> None:
    scenario = Scenario(H100X2, collective, nbytes)
    fields = describe(_obs(scenario))
    pick = decisions.nccl_default(scenario).config
    algos = [a for a in NCCL_ALGORITHMS if fields[f"nccl_algorithm_{a.name.lower()}"] == 1.0]
    protos = [p for p in Protocol if fields[f"nccl_protocol_{p.name.lower()}"] == 1.0]
    assert algos == [pick.algorithm] and protos == [pick.protocol]
    assert fields["nccl_channels"] == pytest.approx(np.log2(pick.channels) / 6)
    # NCCL's pick is the cheapest entry of its own cost table: its cost field is 0.
    assert fields[f"cost_{pick.algorithm.name.lower()}_{pick.protocol.name.lower()}"] == 0.0


def test_every_field_stays_in_its_bounds_and_the_table_matches_the_vector() -> None:
    sizes = np.array([2**k for k in range(3, 38)] * 5)
    colls = np.repeat(np.arange(5), 35)
    for topo in (H100X2, load_topology("pcie_cluster", nodes=4), load_topology("torus2d")):
        obs, picks = encode_batch(topo, decisions.nccl_model_for(topo), colls, sizes,
                                  [("long", "high")] * len(sizes))
        assert obs.shape == (len(sizes), DEPLOYABLE_SIZE) == (len(sizes), len(DEPLOYABLE_FIELDS))
        assert np.all(obs >= 0.0) and np.all(obs <= 1.0)
        assert picks.shape == (len(sizes), 3)


def test_what_the_plugin_cannot_see_does_not_change_the_observation() -> None:
    """The straggler's rank, its exact delay inside a bucket and the exact c2c are invisible."""
    base = Scenario(H100X2, Collective.ALLREDUCE, 1 << 20, 3, 2000.0, 0.5)
    same_bucket = Scenario(H100X2, Collective.ALLREDUCE, 1 << 20, 11, 9000.0, 0.8)
    assert scenario_context(base) == scenario_context(same_bucket) == ("long", "low")
    np.testing.assert_array_equal(_obs(base), _obs(same_bucket))
    other_context = Scenario(H100X2, Collective.ALLREDUCE, 1 << 20, None, 0.0, 2.0)
    assert not np.array_equal(_obs(base), _obs(other_context))


def test_the_exact_byte_count_is_seen_not_only_its_power_of_two_bin() -> None:
    a, b = (_obs(Scenario(H100X2, Collective.ALLREDUCE, n)) for n in (1 << 20, (1 << 20) + 300_000))
    assert describe(a)["log2_bytes"] < describe(b)["log2_bytes"]


def test_deployable_environment_passes_the_gymnasium_checker_and_observes_the_context() -> None:
    env = CollectiveTuningEnv("smoke", observation="deployable", deployable=True)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.observation_space.shape == (DEPLOYABLE_SIZE,)
    first = info["scenario"]
    # Nothing was observed before the first call: the context says no straggler yet.
    np.testing.assert_array_equal(
        obs, encode_deployable(first, decisions.nccl_model_for(first.topology),
                               scenario_context(first, observed_delay_us=0.0)))
    for _ in range(5):
        obs, _, terminated, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert env.observation_space.contains(obs)
        if terminated:
            break


def test_unknown_observation_set_is_refused() -> None:
    with pytest.raises(ValueError, match="observation must be one of research, deployable"):
        gym.make("dynamiccl/CollectiveTuning-v0", observation="everything")


def test_the_environment_docstring_tables_exactly_the_deployable_fields() -> None:
    """Every field at its index with its meaning (long ones continued on rows with empty cells), in
    lines that stay within the 110 columns once indented."""
    import inspect

    doc = inspect.cleandoc(CollectiveTuningEnv.__doc__ or "")
    section = doc.split('With ``observation="deployable"``')[1].split("## Rewards")[0]
    assert f"({DEPLOYABLE_SIZE} fields," in section
    documented: list[list[str]] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] != "Num":
            if cells[0]:
                documented.append(cells)
            else:
                documented[-1][4] += " " + cells[4]
    assert [(int(c[0]), c[1], float(c[2]), float(c[3]), c[4]) for c in documented] == \
        [(f.index, f.name, f.low, f.high, f.meaning) for f in DEPLOYABLE_FIELDS]
    assert max(len(line) for line in section.splitlines()) <= 106


def test_the_channel_scale_follows_nccls_channel_limit() -> None:
    """LOG2_MAX_CHANNELS is derived from dynamiccl.system.nccl.MAX_CHANNELS, not a copy of it."""
    import subprocess
    import sys

    code = ("import dynamiccl.system.nccl as nccl; nccl.MAX_CHANNELS = 32; "
            "from dynamiccl.envs import deployable_observation as d; print(d.LOG2_MAX_CHANNELS)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == 5.0
