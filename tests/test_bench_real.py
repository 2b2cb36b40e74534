"""experiments/bench_real.py off the GPU: its judgement of a recorded run (verdicts against the
launch-to-launch spread, DDP losses, the online tuner's path), --analyse, the records a tuned launch
writes, and its one-line refusals. The measuring itself needs a GPU (``pytest -m gpu`` and the
script on a GPU machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.records import read_jsonl, write_jsonl
from dynamiccl.profiler.measure import interleave
from dynamiccl.profiler.measure.emulation import emulated_topology_dict
from dynamiccl.profiler.measure.runner import CollectiveSpec, summarize
from dynamiccl.system.knobs import Algorithm, Collective, Protocol

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "bench_real.py"
sys.path.insert(0, str(SCRIPT.parent))
import bench_real  # noqa: E402
import real_report  # noqa: E402

sys.path.pop(0)
K = 1 << 10
#: Per pair, (default, tuned) µs per size: 64 KiB wins clearly, 256 KiB is within its spread,
#: 1 MiB loses by more than its spread.
AB = {64 * K: [(300, 190), (310, 195), (295, 200)], 256 * K: [(480, 470), (500, 490), (470, 480)],
      1024 * K: [(1000, 1300), (1010, 1290), (990, 1310)]}
A, B = [0, 2, 0], [1, 0, 0]  # two candidates (tree/simple, ring/ll) in NCCL's ids


def _online() -> dict:
    """3 warmup steps, NCCL's default trial (10 ms), candidate A (7 ms), candidate B (25 ms, its
    trial 2.5x NCCL's), then A pinned from step 9, one noisy step of 11 ms at step 12."""
    pinned = lambda c: [[128 * K, c]]  # noqa: E731
    states = [[]] * 5 + [pinned(A)] * 2 + [pinned(B)] * 2 + [pinned(A)] * 11
    steps = [12.0, 11.0, 10.0, 10.0, 10.0, 7.0, 7.0, 25.0, 25.0, 7.0, 7.0, 7.0, 11.0] + [7.0] * 7
    return {"step_ms": steps, "states": states, "warmup_steps": 3, "exploration_ends_step": 9,
            "trials": {str(128 * K): [[None, 100.0], [A, 60.0], [B, 250.0]]}, "lockstep": True,
            "events": [], "hosts": 8, "tuner": "prior sweep", "bucket_bytes": [198144, 66048]}


def _doc(losses_differ: bool = False) -> dict:
    settings = asdict(bench_real.Settings(pairs=3, ddp_pairs=2, ddp_warmup=2))
    launches = []
    for pair in range(3):
        for arm, i in (("default", 0), ("tuned", 1)):
            launches.append({"arm": arm, "pair": pair,
                             "times_us": {str(n): float(v[pair][i]) for n, v in AB.items()}})
    losses = list(np.linspace(1.0, 0.5, 6))
    ddp = []
    for pair in range(2):
        ddp.append({"arm": "plain", "pair": pair, "step_ms": [20.0, 15.0, 9.0, 8.8, 9.1, 8.9],
                    "losses": losses})
        ddp.append({"arm": "tuned", "pair": pair, "step_ms": [20.0, 15.0, 6.8, 6.7, 6.9, 6.8],
                    "losses": [x * (1.01 if losses_differ else 1.0 + 1e-7) for x in losses]})
    rows = [{"collective": "allreduce", "nodes": 4, "ranks": 4, "from": 32 * K, "to": 128 * K,
             "ours": "tree/simple", "evidence": "measured", "gain": 0.35},
            {"collective": "allreduce", "nodes": 4, "ranks": 4, "from": 256 * K, "to": 4096 * K,
             "ours": "NCCL default", "evidence": "measured", "gain": 0.01}]
    return {"settings": settings, "seconds": 300.0,
            "system": {"gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "nccl": "2.28.9", "torch": "2.11",
                       "emulated_hosts": True},
            "tune": {"rows": rows}, "ab": {"launches": launches}, "ddp": {"launches": ddp},
            "online": _online()}


def test_each_size_is_judged_against_its_launch_to_launch_spread():
    rows = {r["size"]: r for r in real_report.ab_rows(_doc())}
    assert rows[64 * K]["verdict"] == "faster" and rows[64 * K]["speedup"] == pytest.approx(300 / 195)
    assert rows[64 * K]["decision"] == "tree/simple" and rows[64 * K]["evidence"] == "measured"
    assert rows[64 * K]["spread"] == pytest.approx(max(15 / 300, 10 / 195))
    assert rows[256 * K]["verdict"] == "within spread" and rows[256 * K]["decision"] == "NCCL default"
    assert rows[1024 * K]["verdict"] == "slower" and rows[1024 * K]["launches"] == 3
    goals = real_report.analyse(_doc())["goals"]
    assert goals["ab_64KiB_1.4x"] and not goals["ab_no_size_slower_beyond_spread"]


def test_ddp_step_times_are_medians_after_warmup_and_losses_must_match():
    d = real_report.ddp_summary(_doc())
    assert d["plain_step_ms"] == pytest.approx(8.95) and d["tuned_step_ms"] == pytest.approx(6.8)
    assert d["speedup"] == pytest.approx(8.95 / 6.8) and d["losses_match"]
    differ = real_report.ddp_summary(_doc(losses_differ=True))
    assert not differ["losses_match"] and differ["max_loss_rel_diff"] == pytest.approx(0.01)
    assert not real_report.analyse(_doc(losses_differ=True))["goals"]["ddp_losses_match"]


def test_the_online_tuners_path_steps_to_the_best_slower_steps_and_worst_trial():
    o = real_report.online_summary(_online())
    assert o["default_step_ms"] == 10.0 and o["best_step_ms"] == 7.0
    assert o["steps_to_within_5pct"] == 9  # from step 9 on only A runs
    assert o["slower_steps_after_exploration"] == 1 and o["steps_after_exploration"] == 11
    assert o["worst_trial_vs_default"] == pytest.approx(2.5)
    goals = real_report.analyse(_doc())["goals"]
    assert goals["online_within_5pct_in_50_steps"] and goals["online_lockstep"]
    assert not goals["online_worst_trial_2x"] and not goals["online_no_slower_step_after_exploration"]


def test_analyse_reprints_a_recorded_run_without_a_gpu(tmp_path, capsys):
    """The script's main in this process (its refusals as its own process: below)."""
    recorded = tmp_path / "run.json"
    recorded.write_text(json.dumps(_doc()))
    assert bench_real.main(["--analyse", str(recorded)]) == 0
    out = capsys.readouterr().out
    assert "faster" in out and "slower" in out and "goals:" in out
    assert "ab_no_size_slower_beyond_spread NOT met" in out
    assert bench_real.main(["--analyse", str(recorded), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["analysis"]["ddp"]["losses_match"]


@pytest.mark.parametrize("case", ["{}", '{"settings": 1, "system": {}}', "[1, 2]", "deep", "bad",
                                  "wrong shape", "/dev/zero", "fifo", "oversize"])
def test_analyse_refuses_what_is_not_a_recorded_run_in_one_line(tmp_path, capsys, case):
    """Issue 33: KeyError / AttributeError / RecursionError tracebacks, and a hang on /dev/zero.
    The script's main in this process, and as its own process where a hang would show."""
    import os

    path = tmp_path / "run.json"
    if case == "/dev/zero":
        path = Path(case)
    elif case == "fifo":
        os.mkfifo(path)
    elif case == "oversize":  # sparse: nothing written, just past the bound
        with open(path, "wb") as fh:
            fh.truncate(bench_real.MAX_RUN_BYTES + 1)
    elif case == "deep":
        path.write_text("[" * 50_000 + "]" * 50_000)
    elif case == "bad":
        path.write_text("{not json")
    elif case == "wrong shape":  # the right sections holding the wrong things
        path.write_text(json.dumps({**_doc(), "ab": {"launches": [{"arm": "default"}]}}))
    else:
        path.write_text(case)
    if case in ("/dev/zero", "fifo"):
        done = subprocess.run([sys.executable, str(SCRIPT), "--analyse", str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        code = bench_real.main(["--analyse", str(path)])
        out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("bench_real: ") and "give" in err


@pytest.mark.multiproc
def test_the_gloo_dress_rehearsal_runs_every_step_and_writes_the_sections_a_gpu_run_writes(tmp_path):
    """``--backend gloo`` at reduced settings: sweep (one interleaved launch, the choice gloo cannot
    pin in a launch of its own), tune, deploy, A/B, DDP with and without the policy, the
    self-tuning job; what a gloo rehearsal cannot show is said, and no goal is judged."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "gloo", "--nprocs", "2", "--sizes", "4K,64K",
         "--choices", "tree/simple", "--launches", "1", "--iters", "3", "--runs", "2", "--pairs",
         "1", "--ddp-pairs", "1", "--ddp-steps", "31", "--online-hosts", "2", "--online-steps", "8",
         "--out", str(out), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert set(_doc()) <= set(doc) and {"sweep", "topology", "analysis"} <= set(doc)
    assert json.loads((out / "bench_real.json").read_text()) == {k: v for k, v in doc.items()
                                                                 if k != "analysis"}
    sweep = doc["sweep"]
    assert [n["kind"] for n in sweep["launches"]] == ["interleaved", "own"]
    assert sweep["own_launch"] == {"tree/simple/auto-ch": interleave.NO_NCCL}
    records = read_jsonl(out / "sweep.jsonl")
    assert {r.launch for r in records} == {n["launch"] for n in sweep["launches"]}
    assert len(records) == 4 and all(r.backend == "gloo" and r.config_label == "NCCL default"
                                     for r in records)  # gloo's own algorithm, recorded as such
    assert len({r.launch for r in read_jsonl(out / "ab.jsonl")}) == 2
    analysis = doc["analysis"]
    assert analysis["goals"] == {} and "gloo rehearsal" in analysis["goals_not_judged"]
    assert analysis["ddp"]["losses_match"] and analysis["online"]["lockstep"]
    assert "cannot show" in done.stderr and "cannot show" in doc["system"]["cannot_show"]
    again = subprocess.run([sys.executable, str(SCRIPT), "--analyse", str(out / "bench_real.json")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "dress rehearsal" in again.stdout and "judged on a GPU" in again.stdout


@pytest.mark.multiproc
def test_online_only_runs_the_self_tuning_job_alone_and_its_report_reads(tmp_path):
    """``--online-only`` (the GPU check's profiled step): no sweep, tune, A/B or DDP, and the
    analysis judges the online job alone."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "gloo", "--online-only", "--online-hosts", "2",
         "--online-steps", "8", "--out", str(out), "--json"], cwd=ROOT, capture_output=True,
        text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert not {"sweep", "tune", "ab", "ddp"} & set(doc) and doc["online"]["lockstep"]
    assert doc["analysis"]["online"]["lockstep"] and not doc["settings"]["profiler"]
    assert not {"sweep.jsonl", "tuned.dccl", "ab.jsonl"} & {p.name for p in out.iterdir()}


@pytest.mark.parametrize("argv, says", [
    (["--online-only", "--no-online"], "drop one"),
    (["--backend", "gloo", "--profiler"], "--backend nccl")])
def test_options_that_contradict_each_other_are_one_line(tmp_path, capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        bench_real.parse_args([*argv, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and says in err[-1] and not (tmp_path / "run").exists()


def test_without_a_gpu_or_into_a_foreign_folder_it_says_so_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "new")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--analyse" in done.stderr and "--backend gloo" in done.stderr
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine.txt").write_text("the user's")
    assert "holds files of something else" in bench_real.check_out(tmp_path)
    (tmp_path / "bench_real.json").write_text("{}")
    assert bench_real.check_out(tmp_path) is None and bench_real.check_out(tmp_path / "new") is None


def test_a_tuned_launchs_records_say_what_the_policy_forced_and_tune_reads_them(tmp_path):
    rule = pf.Rule(Collective.ALLREDUCE, 64 * K, 128 * K - 1,
                   decision=pf.Decision(Algorithm.TREE, Protocol.SIMPLE))
    header = pf.Header("tune", "2026-01-01T00:00:00Z", "emulated", "0123456789abcdef",
                       pf.DEFAULT_NCCL_RANGE, "cafe")
    path = pf.write(pf.PolicyFile(header, (pf.Slice(rules=(rule,)),)), tmp_path / "tuned.dccl")
    records = []
    for n in (16 * K, 64 * K):
        spec = CollectiveSpec("allreduce", n, "nccl", 0, 2, 2)
        result = summarize(spec, np.full((4, 2, 2, 2), 100.0), emulated_hosts=True)
        records.append(bench_real.tuned_record(result.to_record(), pf.read(path), path))
    assert [r.config_label for r in records] == ["NCCL default", "tree/simple/auto-ch"]
    assert all(r.env["DYNAMICCL_POLICY"] == str(path) and r.emulated_hosts for r in records)
    write_jsonl(records, tmp_path / "ab.jsonl")
    assert read_jsonl(tmp_path / "ab.jsonl") == records
    topology = tmp_path / "topology.yaml"
    topology.write_text(yaml.safe_dump(emulated_topology_dict(4, (9, 0), 132)))
    assert main(["tune", "--topology", str(topology), "--measurements", str(tmp_path / "ab.jsonl"),
                 "--collective", "allreduce", "--no-calibrate", "--json"]) == 0


def test_the_callers_nccl_steering_is_dropped_so_the_default_arm_runs_nccl_alone():
    environ = {"NCCL_TUNER_PLUGIN": "/x/libnccl-tuner.so", "NCCL_ALGO": "tree", "PATH": "/bin",
               "DYNAMICCL_POLICY": ""}
    assert bench_real.clean_environment(environ) == ["NCCL_ALGO", "NCCL_TUNER_PLUGIN"]
    assert environ == {"PATH": "/bin"}
