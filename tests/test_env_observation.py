"""The observation encoding: documented field by field, bounded, and informative."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.observation import (
    OBS_HIGH,
    OBS_LOW,
    OBS_SIZE,
    OBSERVATION_FIELDS,
    delay_bin,
    describe,
    encode,
    size_bin,
)
from dynamiccl.envs.workloads import load_suite
from dynamiccl.system.knobs import N_ACTIONS
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology, preset_names


def _scenario(**kw) -> Scenario:
    base = dict(topology=load_topology("dgx_h100", nodes=2), collective=Collective.ALLREDUCE,
                nbytes=1 << 20)
    return Scenario(**{**base, **kw})


def test_fields_are_indexed_in_order_and_bound_the_box():
    assert [f.index for f in OBSERVATION_FIELDS] == list(range(OBS_SIZE))
    assert len({f.name for f in OBSERVATION_FIELDS}) == OBS_SIZE
    assert (OBS_LOW < OBS_HIGH).all()


def _documented_fields(doc: str) -> dict[int, str]:
    """Index → field name from the docstring's table, expanding ``{a,b}`` and ``+12k`` rows."""
    out = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        row = re.fullmatch(r"(\d+)(?:-(\d+))?(\+12k)?", cells[0])
        if len(cells) < 5 or not row:
            continue
        name = cells[1].split(" ")[0]
        options = re.search(r"\{([^}]*,[^}]*)\}", name)
        names = ([name.replace(options[0], o) for o in options[1].split(",")] if options
                 else [name])
        for k in (range(3) if row[3] else [0]):
            for j, n in enumerate(names):
                out[int(row[1]) + j + 12 * k] = n.replace("{k}", str(k))
    return out


def test_the_docstring_table_lists_every_field_at_its_index():
    # the research table: the deployable one follows it (test_deployable_observation checks that one)
    research = CollectiveTuningEnv.__doc__.split('With ``observation="deployable"``')[0]
    documented = _documented_fields(research)
    assert documented == {f.index: f.name for f in OBSERVATION_FIELDS}
    assert f"Discrete({N_ACTIONS})" in CollectiveTuningEnv.__doc__


def test_every_suite_call_encodes_inside_the_bounds():
    scenarios = {s for suite in ("train", "heldout") for e in load_suite(suite) for s in e.scenarios}
    for s in scenarios:
        obs = encode(s, 1.7)
        assert obs.dtype == np.float32 and obs.shape == (OBS_SIZE,)
        assert ((obs >= OBS_LOW) & (obs <= OBS_HIGH)).all(), describe(obs)


def test_presets_encode_differently():
    encodings = {encode(_scenario(topology=load_topology(p))).tobytes() for p in preset_names()}
    assert len(encodings) == len(preset_names())


def test_call_fields():
    obs = describe(encode(_scenario(collective=Collective.ALLGATHER, nbytes=3 << 20, c2c=1.0)))
    assert obs["collective_allgather"] == 1.0 and obs["collective_allreduce"] == 0.0
    assert obs["size_bin"] == pytest.approx(21 / 36)
    assert obs["c2c"] == pytest.approx(0.5)
    assert (obs["nodes"], obs["gpus_per_node"]) == (pytest.approx(1 / 12), pytest.approx(3 / 7))
    assert obs["tier1_fabric_switch"] == 1.0 and obs["tier0_link_nvlink"] == 1.0


def test_bandwidth_ratio_orders_the_two_tier_rings():
    ratios = [describe(encode(_scenario(topology=load_topology(f"ring_ring_{r}to1"))))
              ["tier1_bandwidth_ratio"] for r in (1, 4, 8, 16, 48)]
    assert ratios[0] == 0.0 and ratios == sorted(ratios) and len(set(ratios)) == 5


def test_a_single_node_has_no_outer_tier():
    obs = describe(encode(_scenario(topology=load_topology("dgx_h100", nodes=1))))
    assert obs["tier0_present"] == 1.0
    assert all(v == 0.0 for k, v in obs.items() if k.startswith(("tier1", "tier2")))


def test_straggler_and_last_time_fields():
    topo = load_topology("dgx_h100", nodes=2)
    late = describe(encode(_scenario(straggler_rank=15, straggler_delay_us=2500.0), 0.5))
    assert late["straggler_present"] == 1.0 and late["straggler_position"] == 1.0
    assert late["straggler_delay_bin"] == pytest.approx(delay_bin(2500.0) / 6)
    assert late["last_time_ratio"] == pytest.approx(-0.25)
    calm = describe(encode(Scenario(topo, Collective.ALLREDUCE, 1 << 20), 1000.0))
    assert calm["straggler_present"] == calm["straggler_position"] == 0.0
    assert calm["last_time_ratio"] == 1.0  # clipped
    seen = describe(encode(Scenario(topo, Collective.ALLREDUCE, 1 << 20),
                           observed_straggler=(0, 50.0)))
    assert (seen["straggler_present"], seen["straggler_position"]) == (1.0, 0.0)
    with pytest.raises(ValueError, match="positive"):
        encode(_scenario(), 0.0)


def test_bins():
    assert [size_bin(n) for n in (0, 1, 2, 1023, 1024, 1 << 40)] == [0, 0, 1, 9, 10, 36]
    assert [delay_bin(d) for d in (0, 50, 100, 2999, 3000, 1e6)] == [0, 1, 2, 4, 5, 6]


def test_encoding_returns_a_fresh_array():
    s = _scenario()
    a = encode(s)
    a[:] = 9
    assert encode(s).max() <= 1.0
    assert encode(replace(s, c2c=0.5))[12] != encode(s)[12]
