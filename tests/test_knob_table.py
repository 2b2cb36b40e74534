"""A knob is one entry of ``dynamiccl.system.knobs.KNOBS``, as an algorithm is one of ALGORITHMS.

The proof is a knob added the way dynamiccl/README.md's checklist ("Adding a knob") says, in a
temporary copy of the tree: the table's entry and Config's field, its physics (a simulator
function the entry names), NCCL's own value of it (a function the entry names), the plugin telling
NCCL (C), its test -- five hand-edited files -- then the generated C header rewritten by its command.
Every other reader picks it up: the action table's columns and the simulator, NCCL's model, the
policy file (a new format version) and the generated C parser, the plugin's pin, the measurement
record and the runner's spec, tune's choice, the runtime's candidate, the CSV columns, ``show``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.plugin import build as plugin

REPO = Path(__file__).resolve().parents[1]
#: The folders the package is built from (pyproject's wheel.packages), copied with git's view.
PACKAGE = ("dynamiccl", "envs", "agents", "profiler", "configs")
#: At most this many source files may need a hand edit to add a knob (issue 38).
MAX_HAND_EDITED = 8

ENTRY = '''    Knob("pipe_depth", "a pipeline depth", int, (2, 4), 1, 8, default=None, in_action_table=False,
         suffix="pd", always_labelled=False,
         nccl=NcclKnob("int8_t", FORMAT_NEXT, "2.32.3", "getCollInfo (made up)",
                       nccl_default="dynamiccl.nccl_model.pipe_depth:own"),
         effect="dynamiccl.simulator.pipe_depth:with_pipe_depth"),
'''
#: Its physics: each step deeper costs 1 % of the time above the base latency.
PHYSICS = '''
def with_pipe_depth(topology, coll, size, tab, idx, times):
    depth = tab.configs.pipe_depth[idx]
    return tab.base_us[idx] + (times - tab.base_us[idx]) * (1 + 0.01 * depth)
'''
NCCL_OWN = '''
def own(model, collective, nbytes, config):
    """NCCL's own pipeline depth: always 2."""
    return 2
'''
KNOB_TEST = '''
from dynamiccl.system.knobs import KNOB


def test_pipe_depth_is_a_knob():
    assert KNOB["pipe_depth"].levels == (2, 4)
'''

#: Runs in the copy: every reader of the table, asked about the new knob.
PROBE = r'''
import ctypes, json, os, sys
from pathlib import Path
sys.meta_path[:] = [m for m in sys.meta_path if type(m).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, sys.argv[1])
import numpy as np
import dynamiccl
assert dynamiccl.__file__.startswith(sys.argv[1]), dynamiccl.__file__
from dynamiccl.agents.shipping.tune_measurements import Choice
from dynamiccl.cli.show import JSON_KEYS
from dynamiccl.nccl_model import NcclModel
from dynamiccl.plugin import policy_file as pf, policy_format
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.profiler.formats.tuner_measurements_csv import tuner_csv_rows
from dynamiccl.profiler.measure.runner import CollectiveSpec
from dynamiccl.runtime.tuning import Candidate, Tuning
from dynamiccl.simulator import simulate
from dynamiccl.system.knobs import Config, ConfigBatch, Knobs, NCCL_KNOBS
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology

ring = Config(Algorithm.RING, Protocol.SIMPLE, 8)
deep = Config(Algorithm.RING, Protocol.SIMPLE, 8, pipe_depth=4)
topology = load_topology("dgx_h100", nodes=2)
times = simulate(topology, int(Collective.ALLREDUCE), 1 << 24,
                 ConfigBatch.from_configs([ring, deep])).time_us[0]
header = pf.Header("probe", "2026-01-01T00:00:00Z", "dgx_h100", "0" * 16, "2.21.5..2.32.3", "0" * 16)
rule = pf.Rule(Collective.ALLREDUCE, 0, 1 << 20, decision=pf.Decision(Algorithm.RING, Protocol.SIMPLE,
                                                                      pipe_depth=4))
text = pf.dumps(pf.PolicyFile(header, (pf.Slice(rules=(rule,)),)))
path = Path(sys.argv[2]) / "deep.dccl"
path.write_text(text)
record = MeasurementRecord("allreduce", 1024, 16, 10.0, 0.1, 0.2, "ring", "simple", pipe_depth=4)
lib = ctypes.CDLL(sys.argv[3])
lib.dynamiccl_pin_knobs.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                    ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
n = len(NCCL_KNOBS)
values = (ctypes.c_longlong * n)(*Knobs(1, 2, None, None, 4).ids())
os.environ["DYNAMICCL_POLICY"] = str(path)
lib.dynamiccl_policy_hash.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
from nccl_tuner_standin import NcclTunerStandIn
comm = NcclTunerStandIn(sys.argv[3], 16, 2)
hash_buf = ctypes.create_string_buffer(65)
candidate = Candidate(1, 2, None, None, 4)
print(json.dumps({
    "knobs": [k.name for k in NCCL_KNOBS],
    "label": deep.label(),
    "simulated_ratio": float(times[1] / times[0]),
    "nccl_own": NcclModel(topology).own_value("pipe_depth", Collective.ALLREDUCE, 1 << 20, ring),
    "format": policy_format.FORMAT_VERSION, "first_line": text.splitlines()[0],
    "read_back": pf.loads(text).slices[0].rules[0].decision.pipe_depth,
    "stale_headers": [str(p) for p in policy_format.stale_headers()],
    "pin": lib.dynamiccl_pin_knobs(4, 0, 1 << 20, values, n),
    "pin_short": lib.dynamiccl_pin_knobs(4, 0, 1 << 20, values, n - 1),
    "c_loaded": lib.dynamiccl_policy_hash(hash_buf, 65) == 0,
    "c_decides": comm.decide(1 << 10),
    "record": MeasurementRecord.from_json(record.to_json()).pipe_depth, "record_label": record.config_label,
    "csv": tuner_csv_rows([record])[0].get("pipe_depth"),
    "spec": CollectiveSpec("allreduce", 1024, "nccl", pipe_depth=4).knobs.pipe_depth,
    "choice": Choice.of(record).label(),
    "runtime": Tuning._encode(1, candidate).tolist(),
    "show_keys": list(JSON_KEYS),
}))
'''


def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                            *PACKAGE], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    for sub in PACKAGE[1:]:  # installed as dynamiccl.<sub> (pyproject's wheel.packages)
        (dest / "dynamiccl" / sub).symlink_to(dest / sub, target_is_directory=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "before"], cwd=dest, check=True)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def _add_pipe_depth(tree: Path) -> None:
    """The hand edits dynamiccl/README.md's checklist names, nothing else."""
    from dynamiccl.plugin.policy_format import FORMAT_VERSION

    knobs = tree / "dynamiccl" / "system" / "knobs.py"
    text = knobs.read_text()
    closing = text.index("\n)\n", text.index("KNOBS: tuple[Knob, ...] = (")) + 1
    knobs.write_text(text[:closing] + ENTRY.replace("FORMAT_NEXT", str(FORMAT_VERSION + 1))
                     + text[closing:])
    _edit(knobs, "    chunk_bytes: int | None = None\n",
          "    chunk_bytes: int | None = None\n    pipe_depth: int | None = None\n")
    (tree / "dynamiccl" / "simulator" / "pipe_depth.py").write_text(PHYSICS)
    (tree / "dynamiccl" / "nccl_model" / "pipe_depth.py").write_text(NCCL_OWN)
    _edit(tree / "dynamiccl" / "plugin" / "csrc" / "tuner.c", "  *entry = 0.0f;\n",
          "  *entry = 0.0f;\n  (void)r->knobs.pipe_depth; /* where NCCL would be told it */\n")
    (tree / "tests").mkdir(exist_ok=True)
    (tree / "tests" / "test_pipe_depth.py").write_text(KNOB_TEST)


def _changed(tree: Path) -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=tree, capture_output=True,
                         text=True, check=True).stdout
    return sorted(line[3:] for line in out.splitlines())


@pytest.mark.slow
def test_a_knob_added_as_one_entry_reaches_every_reader_with_at_most_eight_hand_edits(tmp_path):
    tree = tmp_path / "tree"
    _copy_tree(tree)
    _add_pipe_depth(tree)
    hand_edited = _changed(tree)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    probe_env = {k: v for k, v in env.items() if not k.startswith("DYNAMICCL_")}
    regenerate = subprocess.run(
        [sys.executable, "-c", "import sys; sys.meta_path[:] = [m for m in sys.meta_path if "
         "type(m).__name__ != 'ScikitBuildRedirectingFinder']; sys.path.insert(0, sys.argv[1]); "
         "from dynamiccl.plugin.policy_format import main; sys.exit(main([]))", str(tree)],
        env=env, capture_output=True, text=True, timeout=300)
    assert regenerate.returncode == 0, regenerate.stderr
    generated = sorted(set(_changed(tree)) - set(hand_edited))
    src = tree / "dynamiccl" / "plugin" / "csrc"
    library = plugin.compile_c(plugin.sources(src), "libnccl-tuner-dynamiccl.so",
                               flags=plugin.cflags(src), shared=True, cache=tmp_path / "build",
                               depends=plugin.headers(src))
    probe = subprocess.run([sys.executable, "-c", PROBE, str(tree), str(tmp_path), str(library)],
                           env={**probe_env, "PYTHONPATH": f"{tree}{os.pathsep}{REPO / 'tests'}"},
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.splitlines()[-1])

    print(f"hand-edited ({len(hand_edited)}): {', '.join(hand_edited)}; generated: "
          f"{', '.join(generated)}")
    assert hand_edited == sorted([
        "dynamiccl/system/knobs.py", "dynamiccl/simulator/pipe_depth.py",
        "dynamiccl/nccl_model/pipe_depth.py", "dynamiccl/plugin/csrc/tuner.c",
        "tests/test_pipe_depth.py"])
    assert len(hand_edited) <= MAX_HAND_EDITED
    assert generated == ["dynamiccl/plugin/csrc/policy_format.h"]

    assert seen["knobs"][-1] == "pipe_depth" and seen["label"] == "ring/simple/8ch/4pd"
    assert seen["simulated_ratio"] == pytest.approx(1.04, rel=0.01), "its physics times it"
    assert seen["nccl_own"] == 2
    from dynamiccl.plugin.policy_format import FORMAT_VERSION
    assert seen["format"] == FORMAT_VERSION + 1 and seen["first_line"].endswith(str(FORMAT_VERSION + 1))
    assert seen["read_back"] == 4 and seen["stale_headers"] == []
    assert seen["pin"] == 0 and seen["pin_short"] == -1, "the C pin takes the table's knobs"
    assert seen["c_loaded"] and seen["c_decides"] == [1, 2, 0], "the C parser reads the new column"
    assert seen["record"] == 4 and seen["record_label"].endswith("/4pd") and seen["csv"] == "4"
    assert seen["spec"] == 4 and seen["choice"] == "ring/simple/4pd"
    assert seen["runtime"] == [1, 1, 2, -1, -1, 4]
    assert "pipe_depth" in seen["show_keys"]
