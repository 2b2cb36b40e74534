"""The environment's ``live`` backend, end to end on 4 local gloo processes (no GPU needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynamiccl.envs.backends.live import LiveBackend
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.observation import DELAY_BIN_EDGES_US, OBSERVATION_FIELDS, delay_bin
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

FIELD = {f.name: f.index for f in OBSERVATION_FIELDS}


def _delay_bin(delay_us: float) -> float:
    return delay_bin(delay_us) / (len(DELAY_BIN_EDGES_US) + 1)


#: The injected delay, far above what a loaded 2-core machine adds by descheduling a punctual rank
#: (a few ms), and above the last delay-bin edge, so jitter cannot move the observed delay to
#: another bin: the observation is checked exactly without depending on the machine's load.
LATE_US = 30_000.0


@pytest.mark.multiproc
def test_live_gloo_episode_reports_the_injected_straggler():
    assert LATE_US >= 3 * DELAY_BIN_EDGES_US[-1]
    topo = load_topology("dgx_h100", gpus_per_node=4)  # 4 ranks, like the 4 local processes
    episode = [
        Scenario(topo, Collective.ALLREDUCE, 64 * 2**10, straggler_rank=2, straggler_delay_us=LATE_US),
        Scenario(topo, Collective.ALLGATHER, 256 * 2**10, straggler_rank=2, straggler_delay_us=LATE_US),
        Scenario(topo, Collective.REDUCESCATTER, 64 * 2**10),
        Scenario(topo, Collective.ALLREDUCE, 2**20, straggler_rank=1, straggler_delay_us=LATE_US),
    ]
    backend = LiveBackend(nprocs=4, dist_backend="gloo", warmup=2, iters=10)
    env = CollectiveTuningEnv(scenario="smoke", backend=backend)
    rng = np.random.default_rng(0)
    try:
        obs, _ = env.reset(seed=0, options={"episode": episode})
        assert obs[FIELD["straggler_present"]] == 0  # nothing observed before the first call
        seen = []
        for call, scenario in enumerate(episode):
            action = int(rng.choice(np.flatnonzero(env.action_masks())))  # decided here (rank 0's side)
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["valid"] and math.isfinite(reward) and not truncated
            assert 0 < info["time_us"] < 1e7 and 0 < info["default_time_us"] < 1e7
            if scenario.has_straggler:
                assert info["time_us"] >= LATE_US  # the punctual ranks waited for the late one
            seen.append((obs[FIELD["straggler_present"]], obs[FIELD["straggler_position"]],
                         obs[FIELD["straggler_delay_bin"]]))
            assert terminated == (call == len(episode) - 1)
        assert seen[0] == pytest.approx((1.0, 2 / 3, _delay_bin(LATE_US)))
        assert seen[1] == pytest.approx((1.0, 2 / 3, _delay_bin(LATE_US)))
        # Without an injected straggler nothing as late as the injected one is seen (a loaded
        # machine may still make some rank persistently a little late: that is a real observation).
        assert seen[2][2] < _delay_bin(DELAY_BIN_EDGES_US[-1])
        assert seen[3] == pytest.approx((1.0, 1 / 3, _delay_bin(LATE_US)))
    finally:
        backend.close()


def test_live_backend_refuses_a_system_of_another_size():
    backend = LiveBackend(nprocs=2)
    scenario = Scenario(load_topology("dgx_h100"), Collective.ALLREDUCE, 2**20)
    with pytest.raises(ValueError, match="8 ranks but the live backend runs 2"):
        backend.measure(scenario, 0)
    assert backend.action_times(scenario) is None
