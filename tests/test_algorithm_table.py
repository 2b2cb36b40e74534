"""An NCCL algorithm is one entry of ``dynamiccl.system.nccl.ALGORITHMS`` and its cost models.

dynamiccl/README.md's checklist names them and the steps after (tests/test_readmes.py). The proof
is an algorithm added the way the checklist says, in a fresh interpreter: an entry appended to the
table's source, its simulator cost model and NCCL's cost model of it, nothing else. The knob space,
the simulator, NCCL's cost model, the environment's documented tables and observation, the plots,
the policy file, the generated C header and the C tests all pick it up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from dynamiccl.plugin import build as plugin
from dynamiccl.system import nccl
from dynamiccl.system.nccl import ALGORITHMS, Algorithm

REPO = Path(__file__).resolve().parents[1]

#: A made-up NCCL algorithm with NCCL's next id: AllReduce only, Simple only, ring-like in NCCL's
#: model and chunking (its NCCL cost model beside its physics, both named by the entry as the real
#: ones are), its own physics. Appended to ALGORITHMS the way the README says.
NEW_ENTRY = '''
    AlgorithmSpec(
        name="FAKE", nccl_id=7, nccl_name="Fake", collectives=_AR, protocols=_SIMPLE,
        hierarchical=False, requirements=(),
        base_latency_us=(0.0, 0.0, 5.0),
        hw_latency_us=((0.0, 0.0, 1.0), (0.0, 0.0, 2.0), (0.0, 0.0, 9.0)),
        nccl_cost_model="fake_in_nccl:fake", nccl_graph="ring", chunking="dynamiccl.system.chunking:RING",
        cost_model="fake_algorithm:fake", colour="#123456"),
'''
COST_MODEL = '''
from dynamiccl.system.nccl import Algorithm
from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.phases import single, transfer


def fake(topology, collective, proto, channels):
    """Every rank sends the buffer once at its channels' rate; one hop per rank."""
    rate = channels * P.per_channel_gbps(topology, proto)
    hop = P.hop_latency_us("nvlink", topology.tiers[0].latency_us, Algorithm.FAKE, proto)
    return single(topology.nranks * hop, transfer(1.0, rate), P.base_latency_us(Algorithm.FAKE, proto))
'''
#: NCCL's own cost model of it (what ``dynamiccl/nccl_model/algorithms.py`` holds for NCCL's own):
#: ring-like, three times Ring's bus bandwidth.
NCCL_COST_MODEL = '''
from dynamiccl.nccl_model.algorithms import NcclTuning
from dynamiccl.system.nccl import nsteps

fake = NcclTuning(
    bus_bandwidth=lambda s, g, coll, proto: 3.0 * g.n_channels * g.bw_intra,
    algorithm_bandwidth=lambda coll, bus, nranks: bus * nranks / nsteps(coll, nranks),
    latency=lambda s, t: t.base + t.steps * t.intra, max_threads=(0, 0, 512), thread_threshold=(8, 8, 64))
'''
#: Runs in a fresh interpreter: installs the table with the new entry as dynamiccl.system.nccl before
#: anything imports it, then asks every reader of the table about the new algorithm.
PROBE = '''
import json, sys, types
from pathlib import Path
import dynamiccl.system
start = "ALGORITHMS: tuple[AlgorithmSpec, ...] = (\\n"
source = Path(sys.argv[1]).read_text().replace(start, start + sys.argv[2], 1)
table = types.ModuleType("dynamiccl.system.nccl")
table.__file__ = sys.argv[1]
sys.modules["dynamiccl.system.nccl"] = dynamiccl.system.nccl = table
exec(compile(source, sys.argv[1], "exec"), table.__dict__)

import numpy as np
from dynamiccl import plots
from dynamiccl.plugin import policy_file
from dynamiccl.plugin import policy_format
from dynamiccl.system import knobs
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.deployable_observation import DEPLOYABLE_FIELDS
from dynamiccl.system.knobs import Config, ConfigBatch, valid_mask
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.nccl_model import NcclModel
from dynamiccl.simulator import simulate
from dynamiccl.system.topology import load_topology

fake = Config(Algorithm.FAKE, Protocol.SIMPLE, 8)
topology = load_topology("dgx_h100", nodes=2)
model = NcclModel(topology)
rule = "allreduce 0 1024 * * fake simple 8"
print(json.dumps({
    "ids": {a.name: int(a) for a in Algorithm},
    "action": bool(valid_mask(topology, Collective.ALLREDUCE)[knobs.action_id(fake)]),
    "simulated_us": float(simulate(topology, int(Collective.ALLREDUCE), 1 << 20,
                                   ConfigBatch.from_configs([fake])).time_us[0, 0]),
    "nccl_cost_table": model.cost_table(Collective.ALLREDUCE, 1 << 20).shape[0],
    "nccl_us": float(model.cost_table(Collective.ALLREDUCE, 1 << 20)[Algorithm.FAKE, Protocol.SIMPLE]),
    "nccl_picks_it_at_1GiB": model.choose(Collective.ALLREDUCE, 1 << 30).config.algorithm == Algorithm.FAKE,
    "colour": plots.ALGORITHM_COLOURS["fake"],
    "documented": "fake" in CollectiveTuningEnv.__doc__.split("| protocol")[0]
                  and "| cost_fake_simple" in CollectiveTuningEnv.__doc__,
    "observed": [f.name for f in DEPLOYABLE_FIELDS if "fake" in f.name],
    "policy_token": policy_file.ALGO_TOKENS[Algorithm.FAKE],
    "header": policy_format.c_header(),
}))
'''


def _added_algorithm(tmp_path: Path) -> dict:
    (tmp_path / "fake_algorithm.py").write_text(COST_MODEL)
    (tmp_path / "fake_in_nccl.py").write_text(NCCL_COST_MODEL)
    out = subprocess.run([sys.executable, "-c", PROBE, nccl.__file__, NEW_ENTRY], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_an_algorithm_added_as_one_entry_and_its_cost_model_reaches_every_reader(tmp_path):
    seen = _added_algorithm(tmp_path)
    # NCCL's next id; the simulator-only StragglAR moves behind NCCL's algorithms by itself
    assert seen["ids"]["FAKE"] == 7 and seen["ids"]["STRAGGLAR"] == 8
    assert seen["action"], "the knob space offers it where its entry says it runs"
    assert 0 < seen["simulated_us"] < float("inf"), "the simulator times it with its own cost model"
    assert seen["nccl_cost_table"] == 8 and 0 < seen["nccl_us"], "NCCL's model has its row"
    assert seen["nccl_picks_it_at_1GiB"], "its (3x faster) bandwidth wins NCCL's own pick"
    assert seen["colour"] == "#123456" and seen["documented"]
    assert seen["observed"] == ["nccl_algorithm_fake", "cost_fake_ll", "cost_fake_ll128", "cost_fake_simple"]
    assert seen["policy_token"] == "fake"
    header = seen["header"]
    assert "#define DCCL_NUM_ALGOS 8" in header and "DCCL_ALGO_FAKE = 7," in header
    assert '"pat", "fake"}' in header and "{0x0u, 0x0u, 0u}, /* fake */" in header

    # the C tests read the table's size and names from the header: they build against the new one
    csrc = tmp_path / "csrc"
    (csrc / "tests").mkdir(parents=True)
    src = plugin.source_dir()
    for path in [*src.glob("*.h"), *src.glob("*.c")]:
        (csrc / path.name).write_bytes(path.read_bytes())
    for path in (src / "tests").glob("*.[ch]"):
        (csrc / "tests" / path.name).write_bytes(path.read_bytes())
    (csrc / "policy_format.h").write_text(header)
    for test in ("driver.c", "robust.c", "threads.c", "bench_driver.c"):
        proc = subprocess.run([plugin.find_compiler(None), "-std=c11", "-fsyntax-only", "-Wall",
                               "-Wextra", str(csrc / "tests" / test)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "error" not in proc.stderr


def test_outside_the_table_no_source_lists_the_algorithms():
    """A module naming most algorithms one by one is a second table (a dispatch, a colour map, a
    docstring list) that an added algorithm would miss; the table's readers name at most a few,
    for what is specific to them (ring-over-ring is Ring's, StragglAR the runtime's own path)."""
    members = {a.name for a in Algorithm}
    pattern = re.compile(r"\b(?:Algorithm\.|DCCL_ALGO_)([A-Z_]+)\b")
    sources = [p for folder in ("dynamiccl", "envs", "agents", "profiler", "configs", "experiments")
               for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".c", ".h")]
    listing = {}
    for path in sources:
        if path.name in ("nccl.py", "policy_format.h"):  # the table, and the header made from it
            continue
        named = set(pattern.findall(path.read_text(encoding="utf-8"))) & members
        if len(named) > len(members) // 2:
            listing[str(path.relative_to(REPO))] = sorted(named)
    assert not listing, f"read dynamiccl.system.nccl.ALGORITHMS instead: {listing}"
    assert len(ALGORITHMS) == len(Algorithm)
