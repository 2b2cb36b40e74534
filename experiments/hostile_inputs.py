"""A trial of hostile and careless inputs: every case through the real ``dynamiccl`` executable.

Each case is one command line, run as a user would type it in a fresh copy of a folder of inputs
(real runner records of emulated hosts and their topology, a published nccl-tests log, policies
written by ``dynamiccl export``, and files handed over by mistake), and is sorted into:

- ``clean``: refused in one line with exit code 2, naming what the case says it must name;
- ``sensible``: a valid (or merely odd) input answered with exit code 0, saying what it must say;
- ``traceback``: a traceback or an "internal error" (exit 1);
- ``hang``: no answer within ``--timeout`` seconds;
- ``stray``: a file written that nobody asked for, or an input changed;
- ``accepted``: nonsense accepted with exit code 0;
- ``misleading``: an answer that does not say what the case says it must (another cause, a flag
  nobody gave), or a refusal of more than one line;
- ``refused``: a valid input refused.

A case whose command passes a job's exit status through (``profile job``) says which status is
sensible (``Case.code``). Any process a case leaves running (one whose working folder is the case's
copy of the inputs) makes it ``stray`` too, and is ended.

``tests/test_cli_hostile_inputs.py`` runs the fast cases of this list in the test suite. Usage::

    python experiments/hostile_inputs.py [--only TEXT] [--timeout S] [--json] [--keep DIR]

prints one line per case that is not ``clean``/``sensible`` and the counts per class (``--json``:
every case with its class and the first line it answered).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EMULATED = FIXTURES / "real" / "runner" / "h200_emulated4"
SOPHIA = FIXTURES / "real" / "sophia_dgx_a100_ib"
CLASSES = ("clean", "sensible", "traceback", "hang", "stray", "accepted", "misleading", "refused")
#: Seconds a case may take before it counts as a hang (a tune on 42 records takes ~10 s here).
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Case:
    """One command line (after ``dynamiccl``) and what a good answer is."""

    argv: tuple[str, ...]
    #: "refuse" (one line, exit code 2) or "accept" (exit code 0).
    expect: str
    #: Text the answer must contain (stderr of a refusal; stdout and stderr of an accepted input).
    says: str = ""
    #: Files (workspace-relative) the case may write.
    writes: tuple[str, ...] = ()
    stdin: str | None = None
    #: The trial round that added it (``--round``).
    round: int = 1
    #: Run in the test suite too (``tests/test_cli_hostile_inputs.py``): one case of each kind, each
    #: answered in well under a second (before any fitting or sweep).
    suite: bool = False
    #: The exit status of an accepted input: 0, or the status of a job ``profile job`` ran.
    code: int = 0
    #: (signal, seconds): sent to the command that long after it started, as ``timeout`` or a
    #: closed terminal would (the command must end what it started and keep what it measured).
    stop: tuple[int, float] | None = None
    #: Libraries (import names) the command runs without, as on the core install
    #: (``pip install dynamiccl``): importing one raises the ModuleNotFoundError it would raise there.
    absent: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return " ".join(self.argv)


def refuse(*argv: str, says: str = "", suite: bool = False, stdin: str | None = None,
           absent: tuple[str, ...] = ()) -> Case:
    return Case(tuple(argv), "refuse", says, stdin=stdin, suite=suite, absent=absent)


#: What a printed ``tune --plan`` may write: its chunk-size launches' pin policies and sidecars,
#: into the default ``--logs`` folder, which their printed lines read (``tune --help``).
PRINTED_PLAN_WRITES = ("logs/*.dccl", "logs/*.yaml")


def accept(*argv: str, says: str = "", writes: tuple[str, ...] = (), suite: bool = False,
           stdin: str | None = None, code: int = 0, stop: tuple[int, float] | None = None,
           absent: tuple[str, ...] = ()) -> Case:
    if argv[:1] == ("tune",) and "--plan" in argv and not {"--script", "--run"} & set(argv):
        writes = (*writes, *PRINTED_PLAN_WRITES)
    return Case(tuple(argv), "accept", says, writes, stdin=stdin, suite=suite, code=code, stop=stop,
                absent=absent)


# --------------------------------------------------------------------------------------------
# The folder of inputs
# --------------------------------------------------------------------------------------------

def _records() -> list[dict]:
    return [json.loads(line) for line in (EMULATED / "sweep.jsonl").read_text().splitlines()]


def _jsonl(rows: list) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


#: A record's field set to a value no measurement can have (the first record of the sweep).
RECORD_VALUES: dict[str, dict] = {
    "time_1e300": {"time_us": 1e300}, "time_2h": {"time_us": 7.2e9}, "time_zero": {"time_us": 0},
    "time_neg": {"time_us": -5.0}, "time_nan": {"time_us": float("nan")},
    "time_inf": {"time_us": float("inf")}, "time_str": {"time_us": "349.3"},
    "time_null": {"time_us": None}, "time_bool": {"time_us": True}, "time_tiny": {"time_us": 1e-300},
    "bytes_frac": {"nbytes": 4096.5}, "bytes_1e30": {"nbytes": 10**30}, "bytes_neg": {"nbytes": -4096},
    "bytes_2p63": {"nbytes": 2**63}, "bytes_str": {"nbytes": "4096"}, "bytes_bool": {"nbytes": True},
    "bytes_null": {"nbytes": None},
    "ranks_zero": {"nranks": 0}, "ranks_1e9": {"nranks": 10**9}, "ranks_frac": {"nranks": 4.5},
    "ranks_str": {"nranks": "4"},
    "nodes_zero": {"nnodes": 0}, "nodes_more": {"nnodes": 8}, "nodes_split": {"nnodes": 3},
    "nodes_neg": {"nnodes": -4}, "nodes_str": {"nnodes": "4"},
    "algo_warp": {"algorithm": "warp"}, "algo_int": {"algorithm": 1}, "algo_empty": {"algorithm": ""},
    "algo_stragglar": {"algorithm": "stragglar"}, "proto_ll64": {"protocol": "ll64"},
    "proto_list": {"protocol": ["ll"]},
    "coll_alltoall": {"collective": "alltoall"}, "coll_int": {"collective": 0},
    "coll_empty": {"collective": ""},
    "channels_zero": {"channels": 0}, "channels_99": {"channels": 99}, "channels_frac": {"channels": 2.5},
    "runs_nan": {"time_us_runs": [float("nan"), 1.0]}, "runs_str": {"time_us_runs": "fast"},
    "runs_huge": {"time_us_runs": [1e300, 1e300]}, "runs_neg": {"time_us_runs": [-1.0, 300.0]},
    "emulated_str": {"emulated_hosts": "no"}, "in_place_str": {"in_place": "false"},
    "delay_nan": {"straggler_delay_us": float("nan")}, "delay_neg": {"straggler_delay_us": -3.0},
    "delay_1e300": {"straggler_delay_us": 1e300}, "straggler_rank_99": {"straggler_rank": 99},
    "env_list": {"env": ["NCCL_ALGO=Ring"]}, "gpu_int": {"gpu": 90}, "launch_list": {"launch": [1]},
    "source_dict": {"source": {"x": 1}}, "backend_mpi": {"backend": "mpi"},
}


#: The record values the test suite tries (one of each kind of impossible value).
SUITE_RECORD_VALUES = ("time_1e300", "bytes_frac", "bytes_1e30", "ranks_1e9", "nodes_more", "algo_warp",
                       "runs_nan", "emulated_str", "backend_mpi")


def _record_texts() -> dict[str, str]:
    """Whole record files, each wrong (or odd) in one way."""
    recs = _records()
    text = _jsonl(recs)
    one_node = [dict(r, emulated_hosts=False, nnodes=1) for r in recs]
    files = {f"r_{key}.jsonl": _jsonl([dict(recs[0], **change)] + recs[1:])
             for key, change in RECORD_VALUES.items()}
    files.update({
        "sweep_bom.jsonl": "\ufeff" + text,
        "sweep_crlf.jsonl": text.replace("\n", "\r\n"),
        "sweep_array.jsonl": json.dumps(recs) + "\n",
        "sweep_blank_lines.jsonl": "\n\n" + text.replace("\n", "\n\n"),
        "sweep_trailing_garbage.jsonl": text + "}{\n",
        "sweep_truncated.jsonl": text[: len(text) - 40],
        "sweep_deep.jsonl": "[" * 50_000 + "]" * 50_000 + "\n",
        "sweep_deep_second.jsonl": _jsonl(recs[:1]) + "{\"a\":" * 50_000 + "1" + "}" * 50_000 + "\n",
        "sweep_one_node.jsonl": _jsonl(one_node),
        "sweep_gloo.jsonl": _jsonl([dict(r, backend="gloo") for r in recs]),
        "sweep_a100.jsonl": _jsonl([dict(r, gpu="NVIDIA A100-SXM4-80GB") for r in recs]),
        "sweep_mixed.jsonl": _jsonl(recs[:20] + [dict(r, emulated_hosts=False) for r in recs[20:]]),
        "sweep_real4.jsonl": _jsonl([dict(r, emulated_hosts=False) for r in recs]),
        "sweep_8ranks.jsonl": _jsonl([dict(r, nranks=8, nnodes=8) for r in recs]),
        "sweep_ib.jsonl": _jsonl([dict(r, emulated_hosts=False, env={"NCCL_NET": "IB"}) for r in recs]),
        "sweep_dup_lines.jsonl": text + text,
        "sweep_null.jsonl": "null\n",
        "sweep_only_unknown_keys.jsonl": '{"hello": 1}\n',
        "sweep_string_line.jsonl": '"allreduce"\n',
        "sweep_size0_only.jsonl": _jsonl([dict(r, nbytes=0) for r in recs]),
    })
    return files


def _nccl_texts() -> dict[str, str]:
    """The published nccl-tests log, changed in one row or as a whole."""
    text = (SOPHIA / "all_reduce_n2.txt").read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1048576"])

    def row(**cols: str) -> str:
        fields = lines[at].split()
        for index, value in cols.items():
            fields[int(index[1:])] = value
        return "\n".join(lines[:at] + ["  ".join(fields)] + lines[at + 1:]) + "\n"

    return {
        "n_ok.txt": text, "n_bom.txt": "\ufeff" + text, "n_crlf.txt": text.replace("\n", "\r\n"),
        "n_time_1e300.txt": row(c5="1e300"), "n_size_1e30.txt": row(c0=str(10**30)),
        "n_size_neg.txt": row(c0="-1048576"), "n_time_neg.txt": row(c5="-3.5"),
        "n_header_only.txt": "\n".join(line for line in lines if line.startswith("#")) + "\n",
        "n_empty.txt": "", "n_binary.txt": "\x00\x01\x02" * 100,
    }


def _csv_texts() -> dict[str, str]:
    head = ("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,"
            "bandwidth_gbps,latency_us\n")
    good = "allreduce,1048576,ring,simple,-1,2,16,1,0,10.0,120.5\n"
    return {"c_ok.csv": head + good, "c_ranks0.csv": head + good.replace(",2,16,", ",2,0,"),
            "c_latency_nan.csv": head + good.replace("120.5", "nan"),
            "c_size_1e30.csv": head + good.replace("1048576", str(10**30)),
            "c_algo_warp.csv": head + good.replace("ring", "warp"),
            "c_size_frac.csv": head + good.replace("1048576", "1048576.5"),
            "c_nodes_split.csv": head + good.replace(",2,16,", ",3,16,")}


def _topology_texts() -> dict[str, str]:
    base = (EMULATED / "topology.yaml").read_text()
    tier = "  - {name: nvlink, size: %s, fabric: switch, bandwidth_GBps: 450, latency_us: 0.6, link: %s}\n"
    head = "name: x\ngpu: {arch: sm90, sms: 132}\ntiers:\n"
    return {
        "t_one_tier_100k_nvlink.yaml": head + tier % (100_000, "nvlink"),
        "t_one_tier_1000_pcie.yaml": head + tier % (1000, "pcie"),
        "t_second_tier_nvlink_1000.yaml": head + tier % (8, "nvlink") + tier % (1000, "nvlink"),
        "t_dup_name.yaml": "name: a\nname: b\n" + base.split("\n", 3)[3],
        "t_dup_tier_key.yaml": head + "  - {name: n, size: 8, size: 16, fabric: switch, "
                                      "bandwidth_GBps: 450, latency_us: 0.6, link: nvlink}\n",
        "t_dup_block.yaml": base + "gpu:\n  arch: sm80\n",
        "t_bw_1e308.yaml": head + "  - {name: n, size: 8, fabric: switch, bandwidth_GBps: 1e308, "
                                  "latency_us: 0.6, link: nvlink}\n",
        "t_bw_tiny.yaml": head + "  - {name: n, size: 8, fabric: switch, bandwidth_GBps: 1.0e-300, "
                                 "latency_us: 0.6, link: nvlink}\n",
        "t_lat_1e308.yaml": head + "  - {name: n, size: 8, fabric: switch, bandwidth_GBps: 450, "
                                   "latency_us: 1.0e+308, link: nvlink}\n",
        "t_sms_huge.yaml": "name: x\ngpu: {arch: sm90, sms: 1000000000000}\ntiers:\n" + tier % (8, "nvlink"),
        "t_size_float.yaml": head + tier % ("8.0", "nvlink"),
        "t_bom.yaml": "\ufeff" + base,
        "t_list.yaml": "- a\n- b\n",
        "t_empty.yaml": "",
        "t_laughs.yaml": "name: x\na: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                         "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                         "tiers: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
        "t_long_name.yaml": base.replace("name: emulated_4_hosts_sm90", "name: " + "x" * 5000),
        "t_name_newline.yaml": base.replace("name: emulated_4_hosts_sm90", 'name: "a\\nb"'),
        "t_emulated.yaml": base,
    }


def _batch_texts() -> dict[str, str]:
    ok = '{"topology": "dgx_h100", "collective": "allreduce", "size": "1M"}'

    def line(**changes: object) -> str:
        return json.dumps({**json.loads(ok), **changes}) + "\n"

    return {
        "b_1e9.jsonl": '{"topology": "dgx_h100", "collective": "allreduce", "size": 1e9}\n',
        "b_nodes_float.jsonl": line(nodes=2.0),
        "b_nodes_frac.jsonl": line(nodes=2.5),
        "b_bom.jsonl": "\ufeff" + ok + "\n",
        "b_deep.jsonl": "[" * 50_000 + "]" * 50_000 + "\n",
        "b_array.jsonl": "[" + ok + "]\n",
        "b_unknown_key.jsonl": line(sizes=3),
        "b_delay_huge.jsonl": '{"topology": "dgx_h100", "collective": "allreduce", "size": "1M", '
                              '"straggler_rank": 1, "straggler_delay": "1e30s"}\n',
        "b_empty.jsonl": "",
        "b_crlf.jsonl": ok + "\r\n" + ok + "\r\n",
    }


#: nccl-tests -J reports of the wrong shape: (what is changed in the sample report).
JSON_REPORTS = ("half_list", "deep", "results_int", "time_1e300", "size_1e30", "size_frac")
#: Published-run sidecars beside a real log, each wrong in one way: (the lines that replace the
#: sidecar's own, what the refusal names).
SIDECARS = {
    "nodes_zero": ("nodes: 0", "nodes is 0"), "nodes_huge": ("nodes: 1000000000", "nodes is"),
    "nodes_word": ("nodes: two", "nodes is 'two'"), "ranks_more": ("gpus_per_node: 3", "lists 16"),
    "forced_warp": ("forced: {NCCL_ALGO: warp}", "warp"), "coll_unknown": ("collective: nosuch", "nosuch"),
    "forced_list": ("forced: [1, 2]", "forced is"), "env_int": ("env: 5", "env is 5"),
    "nodes_twice": ("nodes: 2\nnodes: 3", "given twice"),
}
#: Topology fields that contradict each other or say nothing: (the file's tiers, what is named).
_TIER = "  - {name: n, size: 8, fabric: switch, bandwidth_GBps: 450, latency_us: 0.6, link: nvlink}\n"
TOPOLOGY_FIELDS = {
    "link_share": ("tiers:\n" + _TIER + "  - {name: ib, size: 2, fabric: switch, bandwidth_GBps: 50, "
                   "latency_us: 3, link: net, link_share: 1000}\n", "link_share"),
    "name_list": ("tiers:\n" + _TIER, "'name' is [1]"),
    "calibration_int": ("tiers:\n" + _TIER + "calibration: 7\n", "'calibration'"),
    "arch_unknown": ("gpu: {arch: sm120}\ntiers:\n" + _TIER, "sm120"),
    "torus_dims": ("tiers:\n  - {name: n, size: 8, fabric: torus2d, dims: [3, 3], bandwidth_GBps: 450, "
                   "latency_us: 0.6}\n", "dims"),
}


def _round_two_files(root: Path) -> None:
    """The inputs of the second round (:func:`_round_two`)."""
    report = json.loads((FIXTURES / "real" / "formats" / "all_reduce_perf_h100_ring.json").read_text())
    first = report["results"][0]
    changed = {"half_list": {**first, "out_of_place": [1]}, "time_1e300": {
        **first, "out_of_place": {**first["out_of_place"], "time": 1e300}},
        "size_1e30": {**first, "size": 10**30}, "size_frac": {**first, "size": 4096.5}}
    for key in JSON_REPORTS:
        text = (json.dumps({**report, "results": 5}) if key == "results_int" else
                '{"results": ' + "[" * 50_000 + "]" * 50_000 + "}" if key == "deep" else
                json.dumps({**report, "results": [changed[key], *report["results"][1:]]}))
        (root / f"j_{key}.json").write_text(text)
    sidecar = (SOPHIA / "all_reduce_n2.yaml").read_text().splitlines()
    for key, (lines, _) in SIDECARS.items():
        folder = root / f"side_{key}"
        folder.mkdir()
        shutil.copy(SOPHIA / "all_reduce_n2.txt", folder)
        keys = {line.split(":")[0] for line in lines.splitlines()}
        kept = [line for line in sidecar if line.split(":")[0] not in keys]
        (folder / "all_reduce_n2.yaml").write_text("\n".join(kept) + "\n" + lines + "\n")
    for key, (tiers, _) in TOPOLOGY_FIELDS.items():
        name = "name: [1]\n" if key == "name_list" else "name: x\n"
        (root / f"t2_{key}.yaml").write_text(name + tiers)
    record = (EMULATED / "sweep.jsonl").read_text().splitlines()[0]
    (root / "r_dup_key.jsonl").write_text(record[:-1] + ', "time_us": 1.0}\n')
    (root / "b_dup_key.jsonl").write_text('{"topology": "dgx_h100", "collective": "allreduce", '
                                          '"size": "1M", "topology": "dgx_a100"}\n')
    shutil.copy(FIXTURES / "real" / "nccl_debug" / "rtx5090_socket_broadcast_tuning.log", root / "dbg.log")
    policy = (root / "oracle.dccl").read_bytes()
    (root / "bom.dccl").write_bytes(b"\xef\xbb\xbf" + policy)
    (root / "crlf.dccl").write_bytes(policy.replace(b"\n", b"\r\n"))


def _mix_line(**changes: object) -> str:
    """One line of a job's mix (what ``profile job`` writes), for 4 emulated H200 hosts."""
    line = {"collective": "allreduce", "nbytes": 1048576, "nranks": 4, "nnodes": 4, "time_us": 100.0,
            "algbw_GBps": 10.5, "busbw_GBps": 15.7, "source": "profile job", "launch": "job-x",
            "gpu": "NVIDIA H200", "nccl_pick": "ring/simple", "emulated_hosts": True,
            "time_us_runs": [100.0], "calls": 10, "untimed_calls": 0, "total_us": 1000.0,
            "nccl_channels": 4, "p10_us": 100.0, "p90_us": 100.0}
    return json.dumps({**line, **changes}) + "\n"


#: Job mixes given to ``tune --workload``: (the line's changes, what the refusal names).
MIXES = {
    "ok": ({}, ""),
    "16ranks": ({"nranks": 16, "nnodes": 2, "emulated_hosts": False}, "8 ranks per node"),
    "one_rank": ({"nranks": 1, "nnodes": 1}, "ran on one rank"),
    "a100": ({"gpu": "NVIDIA A100-SXM4-80GB"}, "A100"),
    "no_time": ({"total_us": 0.0}, "spends no time"),
    "calls_huge": ({"calls": 10**20}, "calls"),
    "total_inf": ({"total_us": 1e300}, "total_us"),
    "channels_99": ({"nccl_channels": 99}, "nccl_channels"),
    "partial_int": ({"partial": 3}, "partial"),
}
#: A job for ``profile job`` (the tests' stand-ins for NCCL, copied into the inputs): ranks that
#: record their calls through the real plugin, then sleep ``STANDIN_SLEEP`` seconds.
STAND_INS = ("slow_job_with_nccl_standin.py", "nccl_profiler_standin.py")
#: A job of one rank that records one call through the plugin (the stand-in in its folder).
ONE_CALL_JOB = """import os, shutil, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nccl_profiler_standin import NcclProfilerStandIn
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
nccl = NcclProfilerStandIn(os.environ["NCCL_PROFILER_PLUGIN"], 7, 1, 0)
nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, Protocol.SIMPLE, 1, 0, 100)
"""
#: ... that then plants a ring it did not write among the job's own (a local user could).
PLANT_JOB = ONE_CALL_JOB + """planted = "dynamiccl-1-0-00000000000000aa-r0.ring"
shutil.copy(sys.argv[1], os.path.join(os.environ["DYNAMICCL_PROFILE"], planted))
"""
#: A job of 300 calls at once: a ring of 64 records loses most before they are read.
BURST_JOB = """import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nccl_profiler_standin import NcclProfilerStandIn
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
nccl = NcclProfilerStandIn(os.environ["NCCL_PROFILER_PLUGIN"], 7, 1, 0)
for i in range(300):
    nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, Protocol.SIMPLE, 1, 1000 * i, 100)
"""


def _bad_ring(root: Path) -> None:
    """``bad.ring``: a ring the plugin wrote (a stand-in rank's call), then its record changed to a
    collective id NCCL does not have."""
    import numpy as np

    from dynamiccl.plugin import build as plugin
    from dynamiccl.plugin.profile_ring import HEADER_BYTES, RECORD_DTYPE, ring_files

    made = root / "made_rings"
    made.mkdir()
    env = {**_env(), "DYNAMICCL_PROFILE": str(made), "NCCL_PROFILER_PLUGIN": str(plugin.library_path())}
    (root / "one_call_job.py").write_text(ONE_CALL_JOB)
    subprocess.run([sys.executable, "one_call_job.py"], env=env, check=True, cwd=root)
    (ring,) = ring_files(made)
    data = bytearray(ring.read_bytes())
    np.frombuffer(data, RECORD_DTYPE, count=1, offset=HEADER_BYTES)["coll"] = 77
    (root / "bad.ring").write_bytes(bytes(data))
    shutil.rmtree(made)


def _round_four_files(root: Path) -> None:
    """The inputs of the fourth round (:func:`_round_four`)."""
    for key, (changes, _) in MIXES.items():
        (root / f"mix_{key}.jsonl").write_text(_mix_line(**changes))
    for name in STAND_INS:
        shutil.copy(ROOT / "tests" / name, root / name)
    (root / "plant_job.py").write_text(PLANT_JOB)
    (root / "burst_job.py").write_text(BURST_JOB)
    _bad_ring(root)
    mine = root / "myrun"
    mine.mkdir()
    for name in ("metrics.json", "progress.csv", "training_curve.png"):
        (mine / name).write_text(f"the user's own {name}\n")
    broken = root / "brokenrun"
    broken.mkdir()
    (broken / "config.yaml").write_text("agent: [\n")
    cut = root / "cutrun"
    cut.mkdir()
    (cut / "model.zip").write_bytes((root / "oracle.dccl").read_bytes()[:100])  # no zip at all
    (cut / "model.json").write_text('{"algo": "maskable_ppo", "class": '
                                    '"sb3_contrib.ppo_mask.ppo_mask.MaskablePPO", "num_timesteps": 64}')
    log = (SOPHIA / "all_reduce_n2.txt").read_text()
    (root / "noisy.txt").write_text("srun: job 42 queued\n" + log + "job finished\n" * 3)
    sidecar = (SOPHIA / "all_reduce_n2.yaml").read_text()  # it says how it ran, as tune needs
    (root / "noisy.yaml").write_text(sidecar.replace("log: all_reduce_n2.txt", "log: noisy.txt"))
    (root / "glued.txt").write_text(log + "garbage after the log, no nccl-tests row\n" * 120_000)


#: Mixes given to ``ab diff`` beside ``mix_ok.jsonl``: (the file's text, what the refusal names).
AB_MIXES = {
    "empty": (lambda: "", "the job's mix is empty"),
    "dup": (lambda: _mix_line() * 2, "the kind of call of mix_ab_dup.jsonl:1 again"),
    "many": (lambda: "".join(_mix_line(nbytes=8 * (i + 1)) for i in range(100_001)),
             "more than 100000 lines"),
}


def _round_five_files(root: Path) -> None:
    """The inputs of the fifth round (:func:`_round_five`): job mixes ab diff refuses, a job that
    ignores being stopped, a job that prints megabytes, a policy of another NCCL release, a folder
    of the user's with their own ab.json, logs labelled with two NCCL releases, a log whose NCCL
    lines state its forcing."""
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.profiler.formats.published import sidecar_text
    from dynamiccl.system.knobs import Collective

    for key, (text, _) in AB_MIXES.items():
        (root / f"mix_ab_{key}.jsonl").write_text(text())
    # a job only SIGKILL of every process of a launch ends (ab run must, and keep what it measured)
    shutil.copy(ROOT / "tests" / "stubborn_job.py", root / "stubborn_job.py")
    (root / "loud_job.py").write_text("import sys\nfor i in range(32000):\n"
                                      "    sys.stdout.write('%08d' % i + '.' * 94 + '\\n')\n")
    (root / "fail_job.sh").write_text("#!/bin/sh\necho failing\nexit 3\n")
    (root / "fail_job.sh").chmod(0o755)
    policy = pf.read(root / "oracle.dccl")
    header = replace(policy.header, nccl="2.26.2..2.26.2")
    pf.write(replace(policy, header=header), root / "nccl2262.dccl")
    mine = root / "mine"
    mine.mkdir()
    (mine / "ab.json").write_text('{"the user\'s": "settings"}\n')
    releases = root / "releases"
    releases.mkdir()
    for name, version, forced in (("v1", "2.21.5", {}), ("v2", "2.26.2", {"NCCL_ALGO": "Ring"})):
        shutil.copy(SOPHIA / "all_reduce_n2.txt", releases / f"{name}.txt")
        (releases / f"{name}.yaml").write_text(sidecar_text(
            f"{name}.txt", Collective.ALLREDUCE, 2, 8, "process_per_gpu", forced, nccl_version=version,
            source={"labelled_by": "dynamiccl label"}))
    shutil.copy(FIXTURES / "profiler" / "nccl_tests" / "reduce_scatter_perf_forced_ring_simple.txt",
                root / "ring_info.txt")


#: Hard links of the inputs (name: the file it is); a copy of the folder makes them again.
HARD_LINKS = {"hard.jsonl": "sweep.jsonl", "hard_a100.txt": "a100.txt"}


def _hard_links(root: Path) -> None:
    for name, target in HARD_LINKS.items():
        (root / name).unlink(missing_ok=True)
        os.link(root / target, root / name)


def build_workspace(root: Path) -> None:
    """Writes every input the cases read into ``root`` (and the policies they score)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EMULATED / "sweep.jsonl", root / "sweep.jsonl")
    shutil.copy(EMULATED / "topology.yaml", root / "emu.yaml")
    shutil.copy(SOPHIA / "all_reduce_n2.txt", root / "a100.txt")
    shutil.copy(SOPHIA / "topology.yaml", root / "a100.yaml")
    for folder in ("logs", "empty", "docs", "recs"):
        (root / folder).mkdir()
    shutil.copy(EMULATED / "sweep.jsonl", root / "recs" / "sweep.jsonl")
    shutil.copy(SOPHIA / "all_reduce_n2.txt", root / "logs" / "run1.txt")
    (root / "docs" / "README.md").write_text("# my notes\n")
    (root / "notes.txt").write_text("my notes, not a measurement\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"a user's own picture" * 10)
    os.symlink("sweep.jsonl", root / "link.jsonl")
    os.symlink("a100.txt", root / "link_a100.txt")
    _hard_links(root)
    smoke = (ROOT / "configs" / "scenario" / "smoke.yaml").read_text()
    (root / "s_dup.yaml").write_text(smoke.replace("episode_length: 16\n", "episode_length: 16\n"
                                                   "episode_length: 1000000\n", 1))
    for group in (_record_texts(), _nccl_texts(), _csv_texts(), _topology_texts(), _batch_texts()):
        for name, text in group.items():
            (root / name).write_text(text, encoding="utf-8")
    env = _env()
    for argv in (["export", "--policy", "oracle", "--topology", "dgx_h100", "-o", "oracle.dccl"],
                 ["export", "--policy", "oracle", "--topology", "emu.yaml", "--no-gate", "--allow-slower",
                  "-o", "emu.dccl"]):
        subprocess.run(["dynamiccl", *argv], cwd=root, env=env, capture_output=True, check=True)
    shutil.copy(root / "oracle.dccl", root / "damaged.dccl")  # a copy's evidence is cut short
    evidence = (root / "oracle.dccl.evidence.json").read_text()
    (root / "damaged.dccl.evidence.json").write_text(evidence[:200])
    shutil.copy(root / "oracle.dccl", root / "foreign.dccl")
    shutil.copy(root / "emu.dccl.evidence.json", root / "foreign.dccl.evidence.json")
    _round_two_files(root)
    _round_four_files(root)
    _round_five_files(root)


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

TUNE_EMU = ("tune", "--topology", "emu.yaml", "--measurements")
CAL_EMU = ("calibrate", "--topology", "emu.yaml", "-o", "fit.yaml")
SIM = ("simulate", "--topology", "dgx_h100", "--collective", "allreduce", "--size", "1M")
TUNE_A100 = ("tune", "--topology", "a100.yaml", "--measurements")
EMU_FIX = "profile topology --emulate-hosts"


def on_topology(topology: str, says: str, suite: bool = False) -> Case:
    """``simulate`` on a topology file that must be refused."""
    return refuse("simulate", "--topology", topology, "--collective", "allreduce", "--size", "1M",
                  says=says, suite=suite)


def cases() -> list[Case]:
    out: list[Case] = []
    # 1. records that do not fit the system they tune
    out += [
        refuse("tune", "--topology", "dgx_h100", "--measurements", "sweep.jsonl", "-o", "x.dccl",
               says=EMU_FIX, suite=True),
        refuse("calibrate", "sweep.jsonl", "--topology", "dgx_h100", "-o", "fit.yaml", says=EMU_FIX,
               suite=True),
        refuse(*TUNE_EMU, "sweep_one_node.jsonl", "-o", "x.dccl", says="4 ranks per node", suite=True),
        refuse(*CAL_EMU, "sweep_one_node.jsonl", says="4 ranks per node"),
        refuse(*TUNE_EMU, "sweep_a100.jsonl", "-o", "x.dccl", says="A100", suite=True),
        refuse(*CAL_EMU, "sweep_a100.jsonl", says="A100"),
        refuse(*TUNE_EMU, "sweep_mixed.jsonl", "-o", "x.dccl", says="emulated hosts", suite=True),
        refuse(*TUNE_EMU, "sweep_ib.jsonl", "-o", "x.dccl", says="NCCL_NET=IB", suite=True),
        refuse("tune", "--topology", "dgx_h100", "--measurements", "sweep_8ranks.jsonl", "--plan",
               says=EMU_FIX),
        refuse("tune", "--topology", "a100.yaml", "--measurements", "sweep_real4.jsonl", "-o", "x.dccl",
               says="H200"),
        refuse("calibrate", "a100.txt", "--topology", "emu.yaml", "-o", "fit.yaml", says="A100"),
        refuse("calibrate", "a100.txt", "--topology", "dgx_h100", "-o", "fit.yaml", says="A100"),
        refuse("tune", "--topology", "emu.yaml", "--gpus-per-node", "4", "--measurements", "sweep.jsonl",
               "-o", "x.dccl", says=EMU_FIX, suite=True),
        refuse(*TUNE_EMU, "sweep_one_node.jsonl", "sweep.jsonl", "--plan", says="sweep_one_node.jsonl:1",
               suite=True),
        refuse(*TUNE_EMU, ".", "--plan", says="c_algo_warp.csv"),
        refuse(*TUNE_EMU, "emu.yaml", "-o", "x.dccl", says="not a measurement format"),
        refuse(*TUNE_EMU, "oracle.dccl", "-o", "x.dccl", says="not a measurement format"),
        refuse(*TUNE_EMU, "/dev/null", "-o", "x.dccl", says="character device"),
        refuse("tune", "--topology", "sweep.jsonl", "--plan", says="sweep.jsonl"),
        accept("tune", "--topology", "emu.yaml", "--nodes", "2", "--measurements", "sweep.jsonl", "--plan",
               "--budget", "2"),
        accept(*TUNE_EMU, "sweep.jsonl", "--collective", "allreduce", "--collective", "allreduce",
               "--plan", "--budget", "2"),
        accept(*TUNE_EMU, "sweep.jsonl", "-o", "ok.dccl", says="wrote ok.dccl",
               writes=("ok.dccl", "ok.dccl.evidence.json")),
        accept(*TUNE_EMU, "sweep_real4.jsonl", "-o", "ok.dccl", writes=("ok.dccl", "ok.dccl.evidence.json")),
        accept(*TUNE_EMU, "sweep_8ranks.jsonl", "--plan", "--budget", "4"),
        accept("calibrate", "sweep.jsonl", "--topology", "emu.yaml", "-o", "fit.yaml",
               "--keep-undetermined", writes=("fit.yaml",)),
        accept("calibrate", "a100.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               "--keep-undetermined", says="fitted 58 measurements", writes=("fit.yaml",)),
    ]
    # physically impossible values, refused with the file and line by both commands
    for key in RECORD_VALUES:
        out.append(refuse(*TUNE_EMU, f"r_{key}.jsonl", "-o", "x.dccl", says=f"r_{key}.jsonl:1",
                          suite=key in SUITE_RECORD_VALUES))
        out.append(refuse(*CAL_EMU, f"r_{key}.jsonl", says=f"r_{key}.jsonl:1", suite=key == "time_1e300"))
    # whole files
    out += [
        accept(*TUNE_EMU, "sweep_bom.jsonl", "-o", "ok.dccl", writes=("ok.dccl", "ok.dccl.evidence.json")),
        accept(*TUNE_EMU, "sweep_crlf.jsonl", "--plan", "--budget", "2"),
        accept(*TUNE_EMU, "sweep_blank_lines.jsonl", "--plan", "--budget", "2"),
        refuse(*TUNE_EMU, "sweep_array.jsonl", "--plan", says="sweep_array.jsonl"),
        refuse(*TUNE_EMU, "sweep_trailing_garbage.jsonl", "--plan", says="sweep_trailing_garbage.jsonl:43",
               suite=True),
        refuse(*TUNE_EMU, "sweep_truncated.jsonl", "--plan", says="sweep_truncated.jsonl:42"),
        refuse(*TUNE_EMU, "sweep_deep.jsonl", "--plan", says="sweep_deep.jsonl", suite=True),
        refuse(*TUNE_EMU, "sweep_deep_second.jsonl", "--plan", says="sweep_deep_second.jsonl:2", suite=True),
        refuse(*CAL_EMU, "sweep_deep.jsonl", says="sweep_deep.jsonl"),
        refuse(*TUNE_EMU, "sweep_null.jsonl", "-o", "x.dccl", says="sweep_null.jsonl"),
        refuse(*TUNE_EMU, "sweep_only_unknown_keys.jsonl", "-o", "x.dccl", says="sweep_only_unknown_keys"),
        refuse(*TUNE_EMU, "sweep_string_line.jsonl", "-o", "x.dccl", says="sweep_string_line"),
        refuse(*TUNE_EMU, "sweep_gloo.jsonl", "-o", "x.dccl", says="no usable measurement", suite=True),
        refuse(*TUNE_EMU, "sweep_size0_only.jsonl", "-o", "x.dccl", says="no usable measurement"),
        refuse(*CAL_EMU, "sweep_size0_only.jsonl", says="no timed measurement"),
        accept(*TUNE_EMU, "sweep_dup_lines.jsonl", "--plan", "--budget", "2"),
    ]
    # the same file twice counts once
    out += [
        accept("calibrate", "a100.txt", "a100.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               "--keep-undetermined", says="fitted 58 measurements", writes=("fit.yaml",)),
        accept("calibrate", "a100.txt", "link_a100.txt", "hard_a100.txt", "./a100.txt", "--topology",
               "a100.yaml", "-o", "fit.yaml", "--keep-undetermined", says="fitted 58 measurements",
               writes=("fit.yaml",)),
        accept(*TUNE_EMU, "recs", "recs/sweep.jsonl", "--plan", "--budget", "2", says="42 measurements"),
        accept(*TUNE_EMU, "sweep.jsonl", "link.jsonl", "--plan", "--budget", "2", says="42 measurements"),
        accept(*TUNE_EMU, "sweep.jsonl", "--measurements", "./sweep.jsonl", "--plan", "--budget", "2",
               says="42 measurements"),
    ]
    # nccl-tests text, tuner CSV
    out += [
        accept("calibrate", "n_bom.txt", "--topology", "a100.yaml", "-o", "fit.yaml", "--keep-undetermined",
               says="fitted 58", writes=("fit.yaml",)),
        accept("calibrate", "n_crlf.txt", "--topology", "a100.yaml", "-o", "fit.yaml", "--keep-undetermined",
               says="fitted 58", writes=("fit.yaml",)),
        refuse("calibrate", "n_time_1e300.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               says="n_time_1e300.txt:"),
        refuse("calibrate", "n_size_1e30.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               says="n_size_1e30.txt:"),
        refuse("calibrate", "n_size_neg.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               says="n_size_neg.txt:"),
        accept("calibrate", "n_time_neg.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               "--keep-undetermined", says="skipped", writes=("fit.yaml",)),
        refuse("tune", "--topology", "a100.yaml", "--measurements", "n_time_1e300.txt", "-o", "x.dccl",
               says="n_time_1e300.txt:"),
        refuse("calibrate", "n_header_only.txt", "--topology", "a100.yaml", "-o", "fit.yaml",
               says="n_header_only.txt"),
        refuse("calibrate", "n_empty.txt", "--topology", "a100.yaml", "-o", "fit.yaml", says="n_empty.txt"),
        refuse("calibrate", "n_binary.txt", "--topology", "a100.yaml", "-o", "fit.yaml", says="binary"),
        refuse(*TUNE_A100, "c_ranks0.csv", "-o", "x.dccl", says="c_ranks0.csv"),
        refuse(*TUNE_A100, "c_size_1e30.csv", "-o", "x.dccl", says="c_size_1e30.csv"),
        refuse(*TUNE_A100, "c_algo_warp.csv", "-o", "x.dccl", says="warp"),
        refuse(*TUNE_A100, "c_size_frac.csv", "-o", "x.dccl", says="c_size_frac.csv"),
        refuse(*TUNE_A100, "c_nodes_split.csv", "-o", "x.dccl", says="c_nodes_split.csv"),
        refuse(*TUNE_A100, "c_latency_nan.csv", "-o", "x.dccl", says="c_latency_nan.csv"),
    ]
    # 2. no policy without evidence
    out += [
        refuse("tune", "--topology", "emu.yaml", "--measurements", "empty", "-o", "x.dccl",
               says="no usable measurement", suite=True),
        refuse("tune", "--topology", "emu.yaml", "-o", "x.dccl", says="no usable measurement", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--measurements", "docs", "-o", "x.dccl",
               says="no usable measurement", suite=True),
        refuse("tune", "--topology", "dgx_h100", says="no usable measurement"),
        accept("tune", "--topology", "emu.yaml", "-o", "defer.dccl", "--no-measurements",
               says="leaves every call to NCCL", writes=("defer.dccl", "defer.dccl.evidence.json")),
        refuse("tune", "--topology", "emu.yaml", "--measurements", "sweep.jsonl", "--no-measurements",
               "-o", "x.dccl", says="--no-measurements", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--plan", "-o", "x.dccl", says="--plan", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--run", says="--run", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--emulate-hosts", says="--emulate-hosts"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--record", "r.jsonl", says="--record"),
        refuse("tune", "--topology", "emu.yaml", "--measurements", "sweep.jsonl", "-o", "x.dccl",
               "--budget", "5", says="--budget", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--budget", "0", says="--budget"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--budget", "1e9", says="--budget"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--budget", "many", says="--budget"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--margin", "nan", says="--margin"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--margin", "5", says="--margin"),
        refuse("tune", "--topology", "emu.yaml", "--plan", "--collective", "alltoall", says="--collective"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "/proc/x.dccl", says="/proc", suite=True),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "/sys/x.dccl", says="/sys"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "empty", says="is a folder"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "nodir/x.dccl", says="does not exist"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "sweep.jsonl", "--force", says="is an input"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "link.jsonl", "--force", says="is an input"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "emu.yaml", "--force", says="is an input"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "oracle.dccl", says="--force"),
        refuse("calibrate", "sweep.jsonl", "--topology", "emu.yaml", "-o", "/proc/fit.yaml", says="/proc"),
        refuse("export", "--policy", "oracle", "--topology", "dgx_h100", "-o", "/proc/x.dccl", says="/proc"),
    ]
    # 3. a policy knows its system
    out += [
        refuse("export", "--policy", "emu.dccl", "--topology", "dgx_h100", "--nodes", "2", "-o", "e.dccl",
               says="emulated_4_hosts_sm90", suite=True),
        accept("export", "--policy", "emu.dccl", "--topology", "emu.yaml", "--format", "nccl-example-csv",
               "-o", "e.csv", writes=("e.csv",)),
        accept("evaluate", "--policy", "emu.dccl", "--suite", "smoke", says="no rule"),
        accept("evaluate", "--policy", "emu.dccl", "--suite", "heldout", says="no rule"),
        accept("show", "emu.dccl", "--nodes", "2", says="no rule", suite=True),
        accept("show", "damaged.dccl", says="is damaged", suite=True),
        accept("show", "oracle.dccl", "--nodes", "99", says="no rule", suite=True),
        refuse("show", "emu.dccl.evidence.json", says="is JSON", suite=True),
        refuse("export", "--policy", "oracle.dccl", "--topology", "dgx_h100", "--nodes", "2", "-o",
               "e.dccl", says="none of its rules applies"),
        refuse("export", "--policy", "emu.dccl", "--topology", "dgx_h100", "--format",
               "nccl-example-csv", "-o", "e.csv", says="emulated_4_hosts_sm90"),
        accept("export", "--policy", "emu.dccl", "--topology", "emu.yaml", "-o", "again.dccl",
               writes=("again.dccl", "again.dccl.evidence.json")),
        accept("evaluate", "--policy", "emu.dccl", "--suite", "smoke", "--json", says="no rule"),
        accept("evaluate", "--policy", "foreign.dccl", "--suite", "smoke"),
        accept("show", "foreign.dccl", says="another", suite=True),
        accept("show", "emu.dccl"),
    ]
    # 5. messages that must be true; bounds on every tier
    out += [
        on_topology("t_one_tier_100k_nvlink.yaml", says="576", suite=True),
        on_topology("t_one_tier_1000_pcie.yaml", says="576"),
        on_topology("t_second_tier_nvlink_1000.yaml", says="576", suite=True),
        on_topology("t_dup_name.yaml", says="'name'", suite=True),
        on_topology("t_dup_tier_key.yaml", says="'size'", suite=True),
        on_topology("t_dup_block.yaml", says="'gpu'"),
        on_topology("t_bw_1e308.yaml", says="bandwidth_GBps"),
        on_topology("t_bw_tiny.yaml", says="bandwidth_GBps", suite=True),
        on_topology("t_lat_1e308.yaml", says="latency_us", suite=True),
        on_topology("t_sms_huge.yaml", says="gpu.sms", suite=True),
        on_topology("t_size_float.yaml", says="size"),
        accept("simulate", "--topology", "t_bom.yaml", "--collective", "allreduce", "--size", "1M",
               suite=True),
        on_topology("t_list.yaml", says="mapping"),
        on_topology("t_empty.yaml", says="t_empty.yaml"),
        on_topology("t_laughs.yaml", says="t_laughs.yaml"),
        accept("export", "--policy", "oracle", "--topology", "t_long_name.yaml", "-o", "long.dccl",
               writes=("long.dccl", "long.dccl.evidence.json")),
        accept("export", "--policy", "oracle", "--topology", "t_name_newline.yaml", "-o", "nl.dccl",
               writes=("nl.dccl", "nl.dccl.evidence.json")),
        refuse(*SIM, "--straggler-rank", "1", "--straggler-delay", "1e30s", says="--straggler-delay",
               suite=True),
        refuse(*SIM, "--straggler-rank", "1", "--straggler-delay", "2h", says="--straggler-delay"),
        accept(*SIM, "--straggler-rank", "1", "--straggler-delay", "59s"),
        accept(*SIM, "--algo", "ring", "--proto", "simple", suite=True, says="pinned"),
        accept("simulate", "--batch", "b_1e9.jsonl", says='"time_us"'),
        accept("simulate", "--batch", "b_nodes_float.jsonl", suite=True, says='"time_us"'),
        accept("simulate", "--batch", "b_nodes_frac.jsonl", suite=True, says="2.5"),
        accept("simulate", "--batch", "b_bom.jsonl", suite=True, says='"time_us"'),
        accept("simulate", "--batch", "b_deep.jsonl", suite=True, says='"error"'),
        accept("simulate", "--batch", "b_array.jsonl", says='"error"'),
        accept("simulate", "--batch", "b_unknown_key.jsonl", says="sizes"),
        accept("simulate", "--batch", "b_delay_huge.jsonl", suite=True, says="longer than an hour"),
        accept("simulate", "--batch", "b_empty.jsonl"),
        accept("simulate", "--batch", "b_crlf.jsonl", says='"time_us"'),
        accept("simulate", "--batch", "-", says='"error"', stdin="not json\n"),
        accept("tune", "--topology", "emu.yaml", "--plan", "--budget", "4", "--no-measurements",
               says="", suite=False),
        accept("tune", "--topology", "emu.yaml", "--measurements", "sweep.jsonl", "--plan", "--budget", "4"),
    ]
    # other commands, careless
    out += [
        refuse("show", "--nodes", "0", "oracle.dccl", says="--nodes"),
        refuse("show", "sweep.jsonl", says="not a policy file"),
        refuse("show", "emu.yaml", says="policy"),
        refuse("evaluate", "--policy", "sweep.jsonl", "--suite", "smoke", says="sweep.jsonl"),
        refuse("evaluate", "--policy", ",,,", "--suite", "smoke", says="--policy"),
        refuse("evaluate", "--policy", "oracle", "--suite", "emu.yaml", says="emu.yaml"),
        refuse("evaluate", "--policy", "oracle", "--suite", "smoke", "--budget", "0", says="--budget"),
        refuse("export", "--policy", "oracle", "--topology", "dgx_h100", "--node-counts", "0", "-o", "x.dccl",
               says="--node-counts"),
        refuse("export", "--policy", "sweep.jsonl", "--topology", "dgx_h100", "-o", "x.dccl",
               says="sweep.jsonl"),
        refuse("explain", "--topology", "dgx_h100", "--collective", "allreduce", "--min-size", "0",
               "--max-size", "0", says="--max-size 0", suite=True),
        refuse("check-model", "sweep.jsonl", "--topology", "dgx_h100", says="sweep.jsonl"),
        refuse("check-model", "notes.txt", "--topology", "dgx_h100", says="notes.txt"),
        refuse("calibrate", "notes.txt", "--topology", "emu.yaml", "-o", "fit.yaml", says="notes.txt"),
        refuse("calibrate", "docs", "--topology", "emu.yaml", "-o", "fit.yaml", says="docs"),
        refuse("calibrate", "sweep.jsonl", "--topology", "emu.yaml", "-o", "fit.yaml", "--collective", "warp",
               says="warp"),
        refuse("calibrate", "a100.txt", "--topology", "a100.yaml", "-o", "x.png", "--plot", "x.png",
               says="same file"),
        accept("calibrate", "a100.txt", "--topology", "a100.yaml", "-o", "fit.yaml", "--keep-undetermined",
               "--plot", "p.xyz", says="p.xyz.png", writes=("fit.yaml", "p.xyz.png")),
        accept("explain", "--topology", "dgx_h100", "--collective", "allreduce", "--max-size", "64",
               "--plot", "e.xyz", says="e.xyz.png", writes=("e.xyz.png",)),
        refuse("evaluate", "--policy", "oracle", "--suite", "s_dup.yaml", says="'episode_length'",
               suite=True),
        accept(*SIM[:-1], "0", suite=True, says="no-op"),
        accept(*SIM, "--straggler-rank", "1", "--straggler-delay", "3600s"),
        refuse(*SIM, "--straggler-rank", "1", "--straggler-delay", "3601s", says="an hour"),
        refuse("profile", "topology", "--emulate-hosts", "0", says="--emulate-hosts"),
        refuse("profile", "topology", "--emulate-hosts", "1000000", says="--emulate-hosts", suite=True),
        refuse("profile", "collective", "--backend", "gloo", "--nprocs", "2", "--size", "1T",
               says="--size"),
        accept("profile", "collective", "--backend", "gloo", "--nprocs", "2", "--record", "sweep_a100.jsonl",
               "--size", "1K", "--runs", "1", "--iters", "1", writes=("sweep_a100.jsonl",)),
    ]
    return (out + [replace(case, round=2) for case in _round_two()]
            + [replace(case, round=4) for case in _round_four()]
            + [replace(case, round=5) for case in _round_five()])


def _round_two() -> list[Case]:
    """The second round: what the first round's fixes did not reach (nccl-tests -J reports and
    published-run sidecars of the wrong shape, topology fields that contradict each other, batch
    lines, replay tables of another system, policy files an editor touched, training settings)."""
    out = [refuse("tune", "--topology", "dgx_h100", "--measurements", f"j_{key}.json", "--plan",
                  says=f"j_{key}.json") for key in JSON_REPORTS]
    out += [refuse("tune", "--topology", "a100.yaml", "--measurements", f"side_{key}", "--plan", says=says,
                   suite=key in ("forced_warp", "ranks_more"))
            for key, (_, says) in SIDECARS.items()]
    out += [on_topology(f"t2_{key}.yaml", says=says, suite=key == "link_share")
            for key, (_, says) in TOPOLOGY_FIELDS.items()]
    out += [
        accept("simulate", "--batch", "b_dup_key.jsonl", says="given twice", suite=True),
        refuse(*TUNE_EMU, "r_dup_key.jsonl", "--plan", says="given twice", suite=True),
        refuse("evaluate", "--policy", "oracle", "--suite", "smoke", "--backend", "replay", "--replay",
               "sweep.jsonl", says="no choice was measured"),
        refuse("show", "bom.dccl", says="byte-order mark", suite=True),
        refuse("show", "crlf.dccl", says="CRLF", suite=True),
        refuse("evaluate", "--policy", "crlf.dccl", "--suite", "smoke", says="CRLF"),
        refuse("profile", "collective", "--backend", "gloo", "--nprocs", "2", "--inject-straggler",
               "1:3601s", says="longer than an hour", suite=True),
        refuse("tune", "--topology", "emu.yaml", "--measurements", "dbg.log", "-o", "x.dccl",
               says="dbg.log holds no timed measurement"),
        refuse("train", "experiment=quickstart", "agent.model.min_gain=-1", "hydra.run.dir=run",
               says="agent.model.min_gain"),
    ]
    return out


def _round_four() -> list[Case]:
    """The fourth round (issue 40): ``profile job`` and its rings, ``tune --workload``, training into a
    chosen run folder, the plugin build, and reading that is bounded whatever the input."""
    job = ("profile", "job", "--out", "prof")
    out = [refuse(*TUNE_EMU, "sweep.jsonl", "--workload", f"mix_{key}.jsonl", "--plan", says=says,
                  suite=key in ("16ranks", "one_rank", "no_time"))
           for key, (_, says) in MIXES.items() if key != "ok"]
    out += [
        accept(*TUNE_EMU, "sweep.jsonl", "--workload", "mix_ok.jsonl", "--plan", "--budget", "2"),
        refuse(*TUNE_EMU, "sweep.jsonl", "--workload", "sweep.jsonl", "--plan",
               says="not a job's collective mix"),
        accept(*TUNE_EMU, "sweep.jsonl", "--plan", "--budget", "1", "--collective", "allgather",
               says="--budget 1 holds no measurement"),
        accept("tune", "--topology", "a100.yaml", "--measurements", "noisy.txt", "--plan", "--budget", "2",
               says="4 line(s) are no nccl-tests output"),
        refuse(*job, "--", "no-such-program-xyz", says="command not found", suite=True),
        refuse("profile", "job", "--out", "notes.txt", "--", "true", says="is a file", suite=True),
        refuse("profile", "job", "--out", "/proc/prof", "--", "true", says="cannot create the folder",
               suite=True),
        refuse(*job, "--rings", "notes.txt", "--", "true", says="is a file"),
        refuse(*job, "--rings", "/proc/rings", "--", "true", says="cannot create the folder"),
        refuse(*job, "--rings", "docs", "--", "true", says="--rings docs holds other files (README.md)"),
        refuse(*job, "--out", "mix", "--rings", "mix/rings", "--", "true",
               says="--out mix and --rings mix/rings overlap"),
        refuse(*job, "--grace", "-1", "--", "true", says="--grace"),
        refuse(*job, "--grace", "1e9", "--", "true", says="--grace", suite=True),
        refuse(*job, "--grace", "nan", "--", "true", says="--grace"),
        accept(*job, "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 9)", code=137,
               says="the job was killed by SIGKILL", suite=True),
        accept(*job, "--", sys.executable, "-c", "raise SystemExit(3)", code=3,
               says="no NCCL communicator recorded anything"),
        accept(*job, "--timeout", "3", "--", sys.executable, "slow_job_with_nccl_standin.py", code=124,
               says="marked partial", writes=("prof/job.jsonl",)),
        accept(*job, "--rings", "rings", "--", sys.executable, "plant_job.py", "bad.ring",
               says="collective id 77", writes=("prof/job.jsonl", "rings/*")),
        accept(*job, "--records", "64", "--", sys.executable, "burst_job.py",
               says="marked partial", writes=("prof/job.jsonl",)),
        refuse("train", "experiment=smoke", "logger=none", "hydra.run.dir=myrun",
               says="holds metrics.json, progress.csv, training_curve.png", suite=True),
        refuse("train", "experiment=smoke", "logger=none", "hydra.run.dir=brokenrun",
               says="brokenrun/config.yaml: not valid YAML"),
        refuse("export", "--policy", "cutrun", "--topology", "dgx_h100", "-o", "c.dccl",
               says="is not a checkpoint written by `dynamiccl train` that can be read", suite=True),
        refuse("evaluate", "--policy", "cutrun", "--suite", "smoke",
               says="is not a checkpoint written by `dynamiccl train` that can be read"),
        refuse("plugin", "build", "--cc", "/bin/true", says="exited 0, but it made 0 bytes", suite=True),
        accept("simulate", "--batch", "-", stdin="x" * 1_000_000 + "\n", says="longer than any request",
               suite=True),
        accept("calibrate", "glued.txt", "--topology", "a100.yaml", "-o", "fit.yaml", "--keep-undetermined",
               says="read no further than line", writes=("fit.yaml",)),
        accept("calibrate", "noisy.txt", "--topology", "a100.yaml", "-o", "fit.yaml", "--keep-undetermined",
               says="4 line(s) are no nccl-tests output", writes=("fit.yaml",)),
    ]
    return out


def _round_five() -> list[Case]:
    """The fifth round (issues 38, 41): ``ab run``/``ab diff``, ``label``, ``tune --plan``'s script,
    launcher and budget, ``--nccl-version``, ``evaluate --backend replay`` without a suite and its
    flags, ``check-model``'s releases."""
    ab = ("ab", "run", "--policy", "oracle.dccl", "--pairs", "1")
    plan = (*TUNE_EMU, "sweep.jsonl", "--plan", "--launcher", "srun", "--budget", "2")
    label = ("label", "logs/run1.txt", "--nodes", "2", "--gpus-per-node", "8")
    out = [refuse("ab", "diff", "mix_ok.jsonl", f"mix_ab_{key}.jsonl", says=says, suite=key == "dup")
           for key, (_, says) in AB_MIXES.items()]
    out += [
        refuse("ab", "diff", "mix_ok.jsonl", "mix_16ranks.jsonl", says="share no kind of call",
               suite=True),
        refuse("ab", "diff", "mix_ok.jsonl", "/dev/zero", says="is a character device", suite=True),
        refuse("ab", "diff", "mix_ok.jsonl", "docs", says="is a folder"),
        refuse("ab", "diff", "mix_ok.jsonl", "photo.png", says="is not UTF-8 text"),
        accept("ab", "diff", "mix_ok.jsonl", "mix_ok.jsonl", says="collective time: A 1.000 ms"),
        refuse(*ab, "--plugin", "nosuch.so", "--", "true", says="--plugin nosuch.so: no such file",
               suite=True),
        refuse(*ab, "--plugin", "notes.txt", "--", "true", says="no ELF header"),
        refuse(*ab, "--out", "notes.txt", "--", "true", says="is a file"),
        refuse(*ab, "--out", "/proc/ab", "--", "true", says="cannot create the folder"),
        refuse(*ab, "--out", "mine", "--force", "--", "true", says="is not an A/B result", suite=True),
        refuse(*ab, "--", "./notes.txt", says="is not executable"),
        refuse(*ab, "--", "no-such-program-xyz", says="command not found"),
        refuse(*ab, "--timeout", "nan", "--", "true", says="--timeout"),
        refuse(*ab, "--metric", "step (", "--", "true", says="not a regular expression"),
        refuse(*ab, "--metric", "step", "--", "true", says="has no group"),
        refuse(*ab, "--keep-output", "0", "--", "true", says="--keep-output: must be positive"),
        refuse(*ab, "--keep-output", "4096", "--", "true", says="--keep-output: must be 1..1024"),
        refuse(*ab, "--keep-output", "0.5", "--", "true", says="--keep-output: '0.5' is not a whole"),
        accept(*ab, "--out", "ab", "--keep-output", "1", "--", sys.executable, "loud_job.py",
               says="MiB of its 3.1 MiB of output left out of its log", writes=("ab/*",)),
        refuse("ab", "run", "--policy", "sweep.jsonl", "--", "true",
               says="not a policy file; give the .dccl"),
        refuse("ab", "run", "--policy", "c_ok.csv", "--", "true", says="the A/B loads a .dccl"),
        accept(*ab, "--out", "ab", "--", "./fail_job.sh", code=1, says="exited with status 3",
               writes=("ab/*",)),
        accept(*ab, "--out", "ab", "--timeout", "1", "--", sys.executable, "stubborn_job.py", code=1,
               says="was stopped after the timeout of 1 s", writes=("ab/*",)),
        accept(*ab, "--out", "ab", "--", sys.executable, "stubborn_job.py", code=143,
               says="interrupted (SIGTERM)", writes=("ab/*",), stop=(15, 4.0)),
        accept("ab", "run", "--policy", "nccl2262.dccl", "--pairs", "1", "--out", "ab", "--", "true",
               says="holds for NCCL 2.26.2..2.26.2", writes=("ab/*",)),
        refuse(*label[:2], "--nodes", "2", "--gpus-per-node", "3", says="lists 16", suite=True),
        refuse(*label, "--forced", "NCCL_ALGO=Ring", "--forced", "NCCL_ALGO=Tree", says="given twice"),
        refuse(*label, "--forced", "NCCL_MAX_NCHANNELS=-5", says="give a channel count 1..64"),
        refuse(*label[:2], "logs/run1.txt", *label[2:], says="given twice"),
        refuse(*label[:2], "notes.txt", *label[2:], says="notes.txt"),  # and run1's not written
        refuse("label", "a100.txt", "--nodes", "2", "--gpus-per-node", "8",
               says="is not the sidecar of a100.txt; refusing to replace it (move it away)"),
        refuse("label", "ring_info.txt", "--nodes", "1", "--gpus-per-node", "4",
               says="states NCCL_ALGO=Ring", suite=True),
        refuse("label", "ring_info.txt", "--nodes", "1", "--gpus-per-node", "4", "--forced",
               "NCCL_ALGO=Ring", "--forced", "NCCL_PROTO=Simple", "--nccl-version", "2.18.1",
               says="was run with NCCL 2.18.5"),
        refuse(*label[:2], "--nodes", "100000", "--gpus-per-node", "8", says="800000 ranks"),
        refuse(*label, "--forced", "NCCL_ALGO=warp", says="unknown algorithm 'warp'"),
        refuse(*label[:2], "emu.yaml", *label[2:], says="not a measurement format"),
        accept(*label, says="labelled 1 log(s)", writes=("logs/run1.yaml",)),
        refuse(*plan, "--script", "p.sh", "--logs", "x\ntouch pwned #", says="control character",
               suite=True),
        refuse(*plan, "--script", "", says="--script: empty"),
        refuse(*plan, "--script", "p.sh", "--logs", "", says="--logs: empty"),
        refuse(*plan, "--script", "p.sh", "--logs", "notes.txt", says="--logs notes.txt is a file"),
        refuse(*plan, "--script", "p.sh", "--logs", "docs/README.md/x", says="cannot be made"),
        refuse(*plan, "--script", "p.sh", "--logs", "/proc/logs", says="not writable"),
        refuse(*plan, "--script", "notes.txt", says="is not a plan script"),
        refuse(*plan, "--script", "sweep.jsonl", says="is an input of this command"),
        refuse(*plan[:-4], "--launcher", "openmpi", "--run", says="--run measures the plan now"),
        refuse(*plan[:-2], "--budget", "0node-hours", says="--budget"),
        accept(*plan[:-2], "--budget", "1e-9nh", says="does not hold the first launch"),
        refuse(*TUNE_EMU, "sweep.jsonl", "--nccl-version", "2.26.2", says="none to pick"),
        refuse(*TUNE_A100, "releases", says="2 NCCL releases"),
        refuse("evaluate", "--policy", "oracle", "--replay", "sweep.jsonl", says="--replay only applies"),
        refuse("evaluate", "--policy", "oracle", "--topology", "emu.yaml", says="--topology only applies",
               suite=True),
        refuse("evaluate", "--policy", "oracle", "--suite", "smoke", "--reality-seed", "5",
               says="--reality-seed only applies"),
        refuse("evaluate", "--policy", "oracle", "--backend", "replay", "--replay", "sweep.jsonl",
               "--topology", "emu.yaml", says="is an action oracle can take"),
        refuse("evaluate", "--policy", "nccl_default", "--backend", "replay", "--replay", "sweep.jsonl",
               "--topology", "a100.yaml", says="measured on NVIDIA H200 (sm90)", suite=True),
        refuse("evaluate", "--policy", "nccl_default", "--backend", "replay", "--replay", "sweep.jsonl",
               "--topology", "emu.yaml", "--nodes", "2", says="over 4 node(s)"),
        refuse("evaluate", "--policy", "nccl_default", "--backend", "replay", "--replay", "sweep.jsonl",
               says="give --topology"),
        refuse("evaluate", "--policy", "nccl_default", "--backend", "replay", "--replay", "a100.txt",
               "--topology", "a100.yaml", says="no call with NCCL's default beside another choice"),
        accept("evaluate", "--policy", "nccl_default", "--backend", "replay", "--replay", "sweep.jsonl",
               "--topology", "emu.yaml", "--nodes", "4", says="emulated_4_hosts_sm90 (4 ranks)"),
        refuse("check-model", "dbg.log", "--topology", "a100.yaml", "--nccl-version", "2.29.7",
               "--all-releases", says="drop one of them"),
        refuse("check-model", "docs", "--topology", "a100.yaml", says="docs is a folder"),
        refuse("check-model", "", "--topology", "a100.yaml", says="empty"),
        refuse("check-model", "dbg.log", "--topology", "a100.yaml", "--nccl-version", "9.99.99",
               says="a newer release may have changed its constants"),
        refuse("check-model", "dbg.log", "--topology", "a100.yaml", "--nccl-version", "2.18.5",
               says="older releases keep their cost model elsewhere"),
        refuse(*TUNE_EMU, "sweep.jsonl", "-o", "tuned.csv", says="add --format nccl-example-csv",
               suite=True),
        refuse(*TUNE_EMU, "sweep.jsonl", "--format", "nccl-example-csv", "-o", "tuned.dccl",
               says="add --format dccl, or name it .csv"),
        refuse(*TUNE_EMU, "sweep.jsonl", "--format", "nccl-example-csv", "-o", "c_ok.csv", "--force",
               says="is not a DynamICCL export for NVIDIA's example tuner"),
        refuse(*TUNE_EMU, "sweep.jsonl", "--format", "nccl-example-csv", says="--format only applies"),
        refuse("export", "--policy", "oracle", "--topology", "emu.yaml", "-o", "nccl_tuner.conf",
               says="add --format nccl-example-csv"),
        accept(*TUNE_EMU, "sweep.jsonl", "--format", "nccl-example-csv", "-o", "nccl_tuner.conf",
               says="wrote nccl_tuner.conf", writes=("nccl_tuner.conf",)),
    ]
    return out + _round_five_chunks() + _round_five_extras()


def _round_five_chunks() -> list[Case]:
    """``--chunk-bytes`` (issue 38: the chunk size, a knob of the table), on the command line and in
    a ``--batch`` request."""
    sim = ("simulate", "--topology", "a100.yaml", "--nodes", "2", "--gpus-per-node", "8",
           "--collective", "allreduce", "--size", "1M")

    def batch(value: str) -> str:
        return ('{"topology": "a100.yaml", "nodes": 2, "gpus_per_node": 8, "collective": '
                f'"allreduce", "size": 1048576, "chunk_bytes": {value}}}\n')

    return [
        refuse(*sim, "--chunk-bytes", "1K", says="must be 4KiB..16MiB", suite=True),
        refuse(*sim, "--chunk-bytes", "17M", says="must be 4KiB..16MiB"),
        refuse(*sim, "--chunk-bytes", "0", says="must be 4KiB..16MiB"),
        refuse(*sim, "--chunk-bytes", "-4K", says="values cannot be negative"),
        refuse(*sim, "--chunk-bytes", "nan", says="cannot read size 'nan'"),
        refuse(*sim, "--chunk-bytes", "4096.5", says="not a whole number of bytes"),
        refuse(*sim, "--chunk-bytes", "1e30", says="too large"),
        refuse(*sim, "--chunk-bytes", "64K", "--algo", "ring", "--hierarchy", "hierarchical",
               says="only NCCL's own algorithms take one"),
        accept(*sim, "--chunk-bytes", "64KiB", says="pinned (--chunk-bytes 65536)"),
        accept("simulate", "--batch", "-", stdin=batch("1e300"), says="size 1e+300 is too large"),
        accept("simulate", "--batch", "-", stdin=batch('"1K"'), says="got 1024 (1KiB)"),
        accept("simulate", "--batch", "-", stdin=batch("true"), says="not true"),
        accept("simulate", "--batch", "-", stdin=batch('"64K"'), says='"chunk_bytes": 65536'),
    ]


def _round_five_extras() -> list[Case]:
    """A command run on the core install (``pip install dynamiccl``: none of the extras' libraries)
    names the extra to install in one line, writes nothing, and the core's own commands work."""
    from dynamiccl.cli.extras import OPTIONAL_MODULES

    core = tuple(OPTIONAL_MODULES)
    return [
        refuse("evaluate", "--policy", "oracle", "--backend", "replay", "--replay", "sweep.jsonl",
               "--topology", "emu.yaml", says="pip install 'dynamiccl[train]'", absent=core),
        refuse("explain", "--topology", "a100.yaml", "--nodes", "2", "--collective", "allreduce",
               "--plot", "x.png", says="pip install 'dynamiccl[plots]'", absent=core, suite=True),
        refuse("train", "experiment=quickstart", says="pip install 'dynamiccl[train]'", absent=core),
        refuse("sweep", says="pip install 'dynamiccl[sweep]'", absent=core),
        refuse("profile", "collective", "--backend", "gloo", "--nprocs", "2", "--collective",
               "allreduce", "--size", "1MB", says="pip install 'dynamiccl[runtime]'", absent=core),
        refuse("evaluate", "--policy", "oracle", "--suite", "smoke", says="gymnasium",
               absent=("gymnasium",)),
        accept(*TUNE_EMU, "sweep.jsonl", "-o", "core.dccl", says="wrote core.dccl", absent=core,
               writes=("core.dccl", "core.dccl.evidence.json")),
        accept("ab", "diff", "mix_ok.jsonl", "mix_ok.jsonl", says="collective time", absent=core),
        accept("label", "logs/run1.txt", "--nodes", "2", "--gpus-per-node", "8", absent=core,
               says="labelled 1 log(s)", writes=("logs/run1.yaml",)),
        accept(*("simulate", "--topology", "a100.yaml", "--nodes", "2", "--gpus-per-node", "8",
                 "--collective", "allreduce", "--size", "1M", "--chunk-bytes", "4K"),
               says="gain of the best pick", absent=core),
    ]


# --------------------------------------------------------------------------------------------
# Running and sorting
# --------------------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
                "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg", "COLUMNS": "200"})
    env.pop("DYNAMICCL_DEBUG", None)
    return env


def _digest(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@dataclass(frozen=True)
class Outcome:
    case: Case
    verdict: str
    code: int | None
    seconds: float
    answer: str


def run_case(case: Case, workspace: Path, timeout: float) -> Outcome:
    """Runs ``case`` in a fresh copy of ``workspace`` and sorts its answer."""
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        work = Path(tmp) / "w"
        shutil.copytree(workspace, work, symlinks=True)
        _hard_links(work)  # copytree copies a hard link as a file of its own
        before = _digest(work)
        started = time.monotonic()
        try:
            done = _run(case, work, timeout, Path(tmp))
        except subprocess.TimeoutExpired:
            _end_strays(work)
            return Outcome(case, "hang", None, time.monotonic() - started, "")
        seconds = time.monotonic() - started
        strays = _end_strays(work)
        after = _digest(work)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                     and not any(fnmatch.fnmatch(k, pattern) for pattern in case.writes))
    if strays:
        changed.append(f"{len(strays)} process(es) left running: {', '.join(strays[:2])}")
    err, out = done.stderr, done.stdout
    first = next((line for line in err.splitlines() if line.strip()), "") or out[:200]
    verdict = _verdict(case, done.returncode, out, err, changed)
    if changed and verdict in ("clean", "sensible"):
        verdict = "stray"
    answer = first if not changed else f"{first} [changed: {', '.join(changed[:3])}]"
    return Outcome(case, verdict, done.returncode, seconds, answer)


def _run(case: Case, work: Path, timeout: float, scratch: Path) -> subprocess.CompletedProcess:
    """The case's command in ``work``; its ``stop`` signal sent on time (SIGKILL past ``timeout``);
    its ``absent`` libraries hidden by an import hook in ``scratch`` (outside ``work``)."""
    env = _env()
    if case.absent:
        hook = scratch / "core_install"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(CORE_INSTALL_HOOK.format(absent=sorted(case.absent)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(hook), env.get("PYTHONPATH"))))
    with subprocess.Popen(["dynamiccl", *case.argv], cwd=work, env=env, text=True,
                          stdin=subprocess.PIPE if case.stdin is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            if case.stop is not None:
                signum, after = case.stop
                try:
                    out, err = proc.communicate(case.stdin, timeout=after)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signum)
                    out, err = proc.communicate(timeout=timeout)
            else:
                out, err = proc.communicate(case.stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


#: Run at the start of a case's interpreter (``sitecustomize``): the libraries a core install lacks
#: cannot be imported, whether or not they are installed here (as tests/test_core_install.py does).
CORE_INSTALL_HOOK = """import importlib.abc, sys
ABSENT = set({absent!r})
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""


def _end_strays(work: Path) -> list[str]:
    """The command lines of processes a case left running (their working folder is its copy of the
    inputs), each ended with SIGKILL; none where there is no /proc."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if not Path(os.readlink(entry / "cwd")).is_relative_to(work):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            os.kill(int(entry.name), 9)
        except (OSError, ValueError):
            continue
        found.append(command.strip()[:80])
    return found


def _verdict(case: Case, code: int, out: str, err: str, changed: list[str]) -> str:
    if "Traceback" in err or "internal error" in err or code not in (0, 2, case.code):
        return "traceback"
    if case.expect == "refuse":
        if code == 0:
            return "accepted"
        lines = [line for line in err.splitlines() if line.strip()]
        return "clean" if len(lines) == 1 and case.says in err else "misleading"
    if code != case.code:
        return "refused"
    return "sensible" if case.says in out + err else "misleading"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", metavar="TEXT", help="only cases whose command line contains TEXT")
    parser.add_argument("--round", type=int, metavar="N", help="only the cases of round N (1, 2, 4 or 5)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds before a case counts as a hang (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--keep", metavar="DIR", help="build the inputs into DIR and keep them")
    parser.add_argument("--json", action="store_true", help="print every case's class as JSON")
    args = parser.parse_args(argv)
    if shutil.which("dynamiccl") is None:
        parser.error("the dynamiccl executable is not on PATH; install the package (pip install -e .)")
    selected = [c for c in cases() if (not args.only or args.only in c.name)
                and args.round in (None, c.round)]
    with tempfile.TemporaryDirectory(prefix="hostile-inputs-") as tmp:
        workspace = Path(args.keep) if args.keep else Path(tmp) / "inputs"
        build_workspace(workspace)
        outcomes = []
        for i, case in enumerate(selected, 1):
            outcome = run_case(case, workspace, args.timeout)
            outcomes.append(outcome)
            if outcome.verdict not in ("clean", "sensible") and not args.json:
                print(f"[{i}/{len(selected)}] {outcome.verdict:10s} {case.name}\n    "
                      f"-> {outcome.answer[:300]}", flush=True)
    counts = Counter(o.verdict for o in outcomes)
    if args.json:
        print(json.dumps({"counts": {k: counts.get(k, 0) for k in CLASSES},
                          "cases": [{"argv": list(o.case.argv), "class": o.verdict, "exit": o.code,
                                     "seconds": round(o.seconds, 2), "answer": o.answer}
                                    for o in outcomes]}, indent=1))
    else:
        print(f"{len(outcomes)} cases: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in CLASSES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
