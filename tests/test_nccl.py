"""The NCCL vocabulary is written once and every layer reads the same facts from it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra import compose, initialize_config_module

import dynamiccl
from dynamiccl.profiler.formats.records import bandwidths
from dynamiccl.profiler.measure.runner import CollectiveSpec, nccl_env
from dynamiccl.simulator import simulate
from dynamiccl.system import nccl
from dynamiccl.system.knobs import Config, ConfigBatch, invalid_reason, parse_enum
from dynamiccl.system.nccl import (
    ALGORITHM_NCCL_NAMES,
    ALGORITHM_SPECS,
    ALGORITHM_TOKENS,
    COLLECTIVE_TOKENS,
    PROTOCOL_TOKENS,
    Algorithm,
    Collective,
    Protocol,
    bus_factor,
)
from dynamiccl.system.topology import load_topology


def test_ids_are_nccls() -> None:
    # NCCL 2.30.7 src/include/nccl_common.h: ncclFunc_t, NCCL_ALGO_*, NCCL_PROTO_*, the table sizes.
    assert [int(c) for c in (Collective.BROADCAST, Collective.ALLREDUCE)] == [0, 4]
    assert [int(a) for a in (Algorithm.TREE, Algorithm.RING, Algorithm.PAT)] == [0, 1, 6]
    assert (nccl.N_COLLECTIVES, nccl.N_ALGORITHMS, nccl.N_PROTOCOLS) == (5, 7, 3)
    assert nccl.NCCL_ALGORITHMS == tuple(Algorithm)[: nccl.N_ALGORITHMS]


def test_table_sizes_are_counted_from_the_enums_not_written_again() -> None:
    """An algorithm is added to the enum and the capability table; no count is updated by hand."""
    tree = ast.parse(Path(nccl.__file__).read_text(encoding="utf-8"))
    written = [target.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
               and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
               for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
               if isinstance(target, ast.Name) and target.id.startswith("N_")]
    assert written == []
    assert nccl.N_ALGORITHMS == sum(1 for c in ALGORITHM_SPECS.values() if c.nccl_name)


def test_policy_tokens_cover_exactly_what_nccl_can_be_told() -> None:
    assert set(ALGORITHM_TOKENS) == set(nccl.NCCL_ALGORITHMS)
    assert Algorithm.STRAGGLAR not in ALGORITHM_TOKENS
    assert set(COLLECTIVE_TOKENS) == set(Collective) and set(PROTOCOL_TOKENS) == set(Protocol)
    for tokens in (ALGORITHM_TOKENS, COLLECTIVE_TOKENS, PROTOCOL_TOKENS):
        assert len(set(tokens.values())) == len(tokens)


@pytest.mark.parametrize("names", [nccl.COLLECTIVE_NCCL_NAMES, ALGORITHM_NCCL_NAMES,
                                   nccl.PROTOCOL_NCCL_NAMES])
def test_nccl_spellings_parse_back_in_any_case(names: dict) -> None:
    for member, spelled in names.items():
        for text in (spelled, spelled.lower(), spelled.upper()):
            assert parse_enum(type(member), text) == member


def test_profiler_forces_knobs_with_nccl_names() -> None:
    env = nccl_env(CollectiveSpec("allreduce", 1 << 20, backend="nccl", algorithm="collnet_direct",
                                  protocol="ll128", channels=4))
    assert env == {"NCCL_ALGO": "CollNetDirect", "NCCL_PROTO": "LL128",
                   "NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4"}


def test_validity_rules_read_the_capability_table() -> None:
    topo = load_topology("dgx_h100", nodes=2)
    for algo, capability in ALGORITHM_SPECS.items():
        for collective in Collective:
            reason = invalid_reason(topo, collective, Config(algo, Protocol.SIMPLE, 8, _hierarchy(algo)))
            if collective not in capability.collectives:
                assert reason and "only implements" in reason
        if Protocol.LL not in capability.protocols:
            collective = min(capability.collectives)
            reason = invalid_reason(topo, collective, Config(algo, Protocol.LL, 8, _hierarchy(algo)))
            # a requirement the system misses is the more fundamental reason and is named first
            unmet = [r.missing for r in capability.requirements if not r.met_by(topo)]
            assert reason == (unmet[0] if unmet else f"{algo.name.lower()} only runs the simple protocol")


def test_a_missing_feature_is_named_by_its_requirement() -> None:
    pcie = load_topology("pcie_cluster")
    reason = invalid_reason(pcie, Collective.ALLREDUCE, Config(Algorithm.NVLS, Protocol.SIMPLE, 8))
    assert reason == nccl.NVLS_MULTICAST.missing


def _hierarchy(algo: Algorithm) -> object:
    from dynamiccl.system.knobs import NCCL_ALGORITHM_HIERARCHY, Hierarchy

    return NCCL_ALGORITHM_HIERARCHY.get(algo, Hierarchy.FLAT)


@pytest.mark.parametrize(("collective", "nranks", "factor"), [
    (Collective.ALLREDUCE, 8, 2 * 7 / 8), (Collective.ALLGATHER, 8, 7 / 8),
    (Collective.REDUCESCATTER, 4, 3 / 4), (Collective.BROADCAST, 8, 1.0), (Collective.REDUCE, 2, 1.0),
    (Collective.ALLREDUCE, 1, 0.0), (Collective.ALLGATHER, 1, 0.0), (Collective.BROADCAST, 1, 1.0),
])
def test_bus_factor_is_nccl_tests(collective: Collective, nranks: int, factor: float) -> None:
    assert bus_factor(collective, nranks) == pytest.approx(factor)


def test_simulator_and_profiler_report_the_same_busbw_on_one_rank() -> None:
    lone = load_topology("dgx_h100", nodes=1, gpus_per_node=1)
    res = simulate(lone, np.array([int(Collective.ALLREDUCE)]), 1 << 20,
                   ConfigBatch.from_configs([Config(Algorithm.RING, Protocol.SIMPLE, 1)]))
    time_us = float(np.ravel(res.time_us)[0])
    algbw, busbw = bandwidths(Collective.ALLREDUCE, 1 << 20, 1, time_us)
    assert float(np.ravel(res.busbw_GBps)[0]) == busbw == 0.0
    assert algbw > 0


def test_env_id_is_the_same_in_the_package_and_the_config() -> None:
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train")
    assert cfg.env.id == dynamiccl.ENV_ID
    assert yaml.safe_load(open(_config_path("env/default.yaml")))["id"] == dynamiccl.ENV_ID


def _config_path(name: str) -> str:
    from importlib import resources

    return str(resources.files("dynamiccl.configs") / name)


def test_core_imports_do_not_load_gymnasium_and_importing_the_envs_registers_them() -> None:
    code = ("import sys, dynamiccl, dynamiccl.system.knobs, dynamiccl.simulator, "
            "dynamiccl.plugin.policy_file; "
            "print('gymnasium' in sys.modules); import dynamiccl.envs, gymnasium; "
            "print(gymnasium.spec(dynamiccl.ENV_ID).entry_point == "
            "dynamiccl.envs.ENVIRONMENTS[dynamiccl.ENV_ID])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
