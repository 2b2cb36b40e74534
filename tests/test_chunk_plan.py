"""A chunk-size run of a plan is a real launch on every launcher, measured through the plugin's pin.

NCCL has no variable for a chunk size, so the launch loads DynamICCL's tuner plugin with a one-rule
pin policy the plan writes beside its logs, and ``tune`` reads its log as that choice only where
NCCL's own lines show the plugin applied the pin. No cluster and no GPU here: ``srun`` and
nccl-tests are stand-ins (``tests/test_day_one.py``'s), and the stand-in nccl-tests plays NCCL's
part towards the real compiled plugin with the real ``libnccl.so.2`` (``tests/nccl_tuner_standin.py``),
so the plugin lines in the logs are the real plugin's.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_day_one import stand_ins

from dynamiccl.agents.shipping.launchers import (
    PIN_POLICY_PREFIX,
    launches,
    plan_lines,
    script,
    sidecar,
    with_pins,
)
from dynamiccl.agents.shipping.tune_measurements import DEFAULT, Choice, Measurements
from dynamiccl.agents.shipping.tune_plan import PlannedMeasurement
from dynamiccl.cli.main import main
from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.plugin_log import pin_problem
from dynamiccl.profiler.formats.published import PublishedRunError, load_sidecar
from dynamiccl.system.knobs import CHUNK_BYTES_LEVELS, Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology
from dynamiccl.system.units import format_size

AR = Collective.ALLREDUCE
CHUNK = Choice(Algorithm.NVLS_TREE, Protocol.SIMPLE, chunk_bytes=16 << 10)
#: The day-one plan narrowed to all-reduce, with budget enough for the chunk run the model proposes
#: there (on 16 nodes of 8 H100s today NVLSTree/Simple with 16 KiB chunks from 32 MiB).
PLAN = ["tune", "--topology", "dgx_h100", "--nodes", "16", "--plan", "--launcher", "srun",
        "--collective", "allreduce", "--budget", "150"]
_CHUNK_RUN = re.compile(r"\b(r\d+_allreduce_16x8_[a-z0-9-]+-chunk_[0-9A-Za-z]+-[0-9A-Za-z]+)\b")
#: The release of the real NCCL library the plugin checks (the nvidia-nccl wheel's), which the
#: stand-in states too, so the logs agree with what the plugin saw.
REAL_NCCL = "2.30.7"


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> dict[str, str]:
    """The folder to work in, and the environment of a launch node: stand-ins on PATH, the plugin
    the script loads, NCCL's release."""
    monkeypatch.chdir(tmp_path)
    env = stand_ins(tmp_path / "bin")
    return {**env, "DYNAMICCL_PLUGIN": str(plugin.library_path()),
            "NCCL_TESTS_STANDIN_VERSION": REAL_NCCL}


def chunk_run(lines: list[str]) -> str:
    """The name of the plan's one chunk-size launch, from its printed lines."""
    names = {m.group(1) for line in lines for m in [_CHUNK_RUN.search(line)] if m}
    assert len(names) == 1, f"the plan has one chunk run: {names}"
    return names.pop()


def _chunk_line(log: Path) -> re.Match | None:
    return re.search(r"DynamICCL chunk: allreduce (\w+/\w+) piece of \d+ B .*-> (\d+) B",
                     log.read_text())


@pytest.mark.parametrize("debug_file", [False, True], ids=["", "nccl_debug_file_exported"])
def test_a_16x8_srun_plans_chunk_run_loads_the_plugin_and_tune_reads_it_stand_in_srun_nccl_tests(
        cluster, capsys, tmp_path, debug_file):
    """With NCCL_DEBUG_FILE exported (a site's or a user's; NCCL then writes its lines there, and
    the stand-in does as NCCL), the launches still log NCCL's release and the plugin's lines: the
    chunk run was refused as if no plugin had loaded, and no release was stamped."""
    if debug_file:
        cluster["NCCL_DEBUG_FILE"] = str(tmp_path / "nccl_debug" / "nccl.%h.%p.log")
        (tmp_path / "nccl_debug").mkdir()
    assert main([*PLAN, "--script", "plan.sh"]) == 0
    capsys.readouterr()
    dry = subprocess.run(["bash", "plan.sh", "--dry-run"], capture_output=True, text=True,
                         env=cluster, check=True).stdout.splitlines()
    name = chunk_run(dry)
    line, = [x for x in dry if name in x]
    policy = Path("logs").absolute() / f"{name}.dccl"
    assert line.startswith("env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_DEBUG_FILE= "
                           f"DYNAMICCL_LOG_DECISIONS=1 NCCL_TUNER_PLUGIN={plugin.library_path()} "
                           f"DYNAMICCL_POLICY={policy} DYNAMICCL_POLICY_SHA256=")
    low, high = map(int, re.search(r" -b (\d+) -e (\d+) ", line).groups())
    assert "srun --export=ALL --nodes=16 --ntasks-per-node=8 --gpus-per-node=8 all_reduce_perf " \
           f"-b {low} -e {high} " in line and "NCCL_ALGO" not in line
    assert not Path("logs").exists(), "a dry run writes nothing, the pin policy neither"

    ran = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True, env=cluster)
    assert ran.returncode == 0, ran.stderr
    # the pin policy: valid, checksummed, one rule of exactly the launch's call and communicator
    pin = pf.read(policy)
    rule, = pin.slice().rules
    assert (rule.collective, rule.min_bytes, rule.max_bytes, rule.nodes, rule.ranks) == \
           (AR, low, high, 16, 128)
    chunk = Choice(**rule.decision.given())
    assert chunk.chunk_bytes in CHUNK_BYTES_LEVELS
    assert f"-{format_size(chunk.chunk_bytes).lower()}-chunk_" in name
    assert pin.header.nccl == pf.DEFAULT_NCCL_RANGE and pin.header.policy == PIN_POLICY_PREFIX + name
    # the plugin took it and answered getChunkSize with the planned chunk at those sizes
    log = Path("logs") / f"{name}.txt"
    text = log.read_text()
    pair = f"{chunk.algorithm.name.lower()}/{chunk.protocol.name.lower()}"
    assert f"DynamICCL: policy {PIN_POLICY_PREFIX}{name} (sha256 {pf.file_hash(policy)})" in text
    assert f"DynamICCL decision: allreduce {low}-{high} B, nNodes 16 nRanks 128: {pair}" in text
    assert _chunk_line(log).groups() == (pair, str(chunk.chunk_bytes))
    picked = f"Algo {chunk.algorithm.name} proto {chunk.protocol.name}"
    assert all(f"AllReduce: {n} Bytes -> {picked}" in text for n in (low, high))
    # its sidecar labels it as the chunk choice, and tune reads it so, never as NCCL's default
    run, = load_sidecar(Path("logs") / f"{name}.yaml")
    assert run.forced == {} and not run.is_default
    assert {Choice.of(r) for r in run.records} == {chunk}
    measured = Measurements(load_paths(["logs"]).records).at(AR, 128, low)
    assert measured[chunk].launches == 1 and DEFAULT in measured
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "16", "--measurements", "logs",
                 "-o", "tuned.dccl"]) == 0
    assert f"NCCL {REAL_NCCL}..{REAL_NCCL}" in capsys.readouterr().err
    assert not debug_file or not any((tmp_path / "nccl_debug").iterdir())  # NCCL wrote all to the logs
    # run again: every launch is done, its pin policy left as it was
    before = policy.stat().st_mtime_ns
    again = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True, env=cluster,
                           check=True)
    assert f"skip {name} (done)" in again.stderr and policy.stat().st_mtime_ns == before


def test_a_chunk_run_is_a_launch_on_every_launcher_with_the_variables_on_every_rank():
    topology = load_topology("dgx_h100", nodes=2)
    runs = with_pins(launches([PlannedMeasurement(AR, 16, CHUNK, 1 << 25, 1.0, "", nodes=2)], 8),
                     topology)
    openmpi, mpich = plan_lines(runs, ("openmpi", "mpich"), "logs")
    sha = runs[0].pin_sha256
    assert ' -x NCCL_TUNER_PLUGIN="$(dynamiccl plugin path)" -x DYNAMICCL_POLICY=' in openmpi
    assert f"-x DYNAMICCL_POLICY_SHA256={sha} " in openmpi and "-x DYNAMICCL_LOG_DECISIONS=1" in openmpi
    assert ' -genv NCCL_TUNER_PLUGIN "$(dynamiccl plugin path)" -genv DYNAMICCL_POLICY ' in mpich
    assert f"-genv DYNAMICCL_POLICY_SHA256 {sha} " in mpich
    assert all("NCCL_ALGO" not in x and "pinned through DynamICCL's tuner plugin" in x
               for x in (openmpi, mpich))
    # a printed plan's sidecar labels the log whichever of the two lines writes it
    source = yaml.safe_load(sidecar(runs[0], "openmpi", "test", printed_logs="logs",
                                    also=("mpich",)))["source"]
    assert source["launcher"] == "openmpi or mpich"
    assert (source["command"], source["command_mpich"]) == tuple(x.split(" > ")[0]
                                                                  for x in (openmpi, mpich))
    one_node = with_pins(launches([PlannedMeasurement(AR, 8, CHUNK, 1 << 25, 1.0, "")], 8),
                         load_topology("dgx_h100", nodes=1))
    local, = plan_lines(one_node, ("local",), "logs")
    assert local.startswith("env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_DEBUG_FILE= ")
    assert " all_reduce_perf -b 33554432 -e 33554432 -f 2 -g 8 " in local
    # the script writes each pin policy before its launch, from the text the plan made
    text = script(runs, "openmpi", logs="logs", made_by="test", then="tune")
    assert f"pin {runs[0].name} {sha} <<'POLICY'\n{runs[0].pin}POLICY\nlaunch {runs[0].name} " in text
    assert '-x NCCL_TUNER_PLUGIN="$DYNAMICCL_PLUGIN" ' in text
    assert f'-x DYNAMICCL_POLICY="$LOGS_ABS/{runs[0].name}.dccl" ' in text
    with pytest.raises(ValueError, match="has no pin policy"):
        plan_lines(launches([PlannedMeasurement(AR, 16, CHUNK, 1 << 25, 1.0, "", nodes=2)], 8))


def test_the_script_never_writes_a_pin_policy_over_a_users_file_stand_in_nccl_tests(cluster, capsys):
    assert main([*PLAN, "--script", "plan.sh"]) == 0
    NAME = chunk_run(Path("plan.sh").read_text().splitlines())
    Path("logs").mkdir()
    mine = Path("logs") / f"{NAME}.dccl"
    mine.write_text("my notes\n")
    ran = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True,
                         env={**cluster, "KEEP_GOING": "1"})
    assert ran.returncode == 1
    assert f"failed: logs/{NAME}.dccl is there and is not the pin policy of {NAME}" in ran.stderr
    assert mine.read_text() == "my notes\n" and not (Path("logs") / f"{NAME}.txt").exists()
    # nor without a plugin to load
    mine.unlink()
    ran = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True,
                         env={**cluster, "DYNAMICCL_PLUGIN": "/nowhere/libnccl-tuner-dynamiccl.so"})
    assert ran.returncode == 1 and f"failed: {NAME} loads DynamICCL's tuner plugin and none is " \
                                   "here ('/nowhere/libnccl-tuner-dynamiccl.so')" in ran.stderr


def _printed_chunk_run(logs: str, env: dict[str, str], capsys, plugin_path: str
                       ) -> tuple[Path, str]:
    """Plans the printed way into ``logs`` (its pin policy and sidecar written by tune), and runs
    the chunk launch's line with a ``dynamiccl`` on PATH whose ``plugin path`` prints
    ``plugin_path``: the logs folder, and the launch's log."""
    assert main([*PLAN, "--logs", logs]) == 0
    out, err = capsys.readouterr()
    assert "wrote the pin policies and sidecars of 1 launch(es) pinned through the plugin into " \
           f"{logs}/" in err
    name = chunk_run(out.splitlines())
    line, = [x for x in out.splitlines() if name in x]
    assert f'NCCL_TUNER_PLUGIN="$(dynamiccl plugin path)" DYNAMICCL_POLICY={Path(logs).absolute()}/' in line
    shim = Path("bin") / "dynamiccl"
    shim.write_text(f"#!/bin/sh\necho {plugin_path}\n")
    shim.chmod(0o755)
    subprocess.run(["bash", "-c", line.split("  # ")[0]], env=env, check=True)
    return Path(logs), Path(logs) / f"{name}.txt"


def _tune(logs: Path, capsys) -> tuple[int, str]:
    code = main(["tune", "--topology", "dgx_h100", "--nodes", "16", "--measurements", str(logs),
                 "-o", f"{logs}.dccl"])
    return code, capsys.readouterr().err


def test_a_printed_plans_chunk_line_runs_as_printed_and_tune_reads_it_stand_in_nccl_tests(cluster, capsys):
    logs, log = _printed_chunk_run("printed", cluster, capsys, str(plugin.library_path()))
    run, = load_sidecar(log.with_suffix(".yaml"))
    chunk, = {Choice.of(r) for r in run.records}
    assert _chunk_line(log).group(2) == str(chunk.chunk_bytes) and chunk.chunk_bytes is not None
    assert {Choice.of(r) for r in load_paths([logs]).records} == {chunk}
    assert load_paths([logs]).skipped == [], "the pin policy is part of its run, not a stray file"


def test_a_pinned_launchs_log_is_read_once_stand_in_nccl_tests(cluster, capsys, opened):
    """tune parses a pinned launch's log and checks the plugin's lines in it in one read (the check
    read the whole log again)."""
    logs, log = _printed_chunk_run("once", cluster, capsys, str(plugin.library_path()))
    opened.clear()
    code, err = _tune(logs, capsys)
    assert code == 0, err
    assert opened[log.resolve(), "r"] == 1
    assert opened[log.with_suffix(".yaml").resolve(), "r"] == 1


def test_an_unlabelled_or_unapplied_chunk_log_is_refused_by_name_stand_in_nccl_tests(cluster, capsys):
    real = str(plugin.library_path())
    # the plugin was never loaded (no library where `dynamiccl plugin path` said)
    missing, log = _printed_chunk_run("missing", cluster, capsys, "/nowhere/libnccl-tuner-dynamiccl.so")
    assert "DynamICCL" not in log.read_text()
    code, err = _tune(missing, capsys)
    refusal, = [x for x in err.splitlines() if "error:" in x]  # one line, naming the fix
    assert code == 2 and f"{log}: its sidecar says DynamICCL's tuner plugin pinned " in refusal
    assert "the plugin never loaded the pin policy" in err and "NCCL_TUNER_PLUGIN" in err
    # an NCCL older than 2.30.3 applies the pair and never asks for a chunk
    old, log = _printed_chunk_run("old", {**cluster, "NCCL_TESTS_STANDIN_VERSION": "2.26.2"},
                                  capsys, real)
    assert "DynamICCL decision: allreduce" in log.read_text() and _chunk_line(log) is None
    code, err = _tune(old, capsys)
    assert code == 2 and f"{log}: its sidecar says" in err
    assert "NCCL 2.26.2 never asks a tuner for chunk_bytes (getChunkSize (tuner v6), NCCL 2.30.3 " \
           "and later)" in err
    # a rank read another file than the plan's: the plugin stepped aside there, and says so
    assert main([*PLAN, "--logs", "other"]) == 0
    name = chunk_run(capsys.readouterr().out.splitlines())
    other = Path("other")
    pin = pf.read(other / f"{name}.dccl")
    pf.write(pf.PolicyFile(pf.Header(**{**pin.header.__dict__, "created": "2000-01-01T00:00:00Z"}),
                           pin.slices), other / f"{name}.dccl")
    sidecar = yaml.safe_load((other / f"{name}.yaml").read_text())
    line = sidecar["source"]["command"].replace('"$(dynamiccl plugin path)"', real)
    subprocess.run(["bash", "-c", f"{line} > other/{name}.txt 2>&1"], env=cluster, check=True)
    code, err = _tune(other, capsys)
    assert code == 2 and "the plugin stepped aside on a rank (NCCL WARN DynamICCL: policy file" in err
    assert "fix what it names and run the launch again from the plan" in err
    # the log without its sidecar: the plugin's lines say it steered the calls, nothing says how
    unlabelled, log = _printed_chunk_run("unlabelled", cluster, capsys, real)
    log.with_suffix(".yaml").unlink()
    code, err = _tune(unlabelled, capsys)
    assert code == 2 and f"1 log(s) show DynamICCL's tuner plugin pinning their calls ({log}) but " \
                         "no sidecar says what it pinned" in err


def test_a_sidecar_without_a_pin_of_a_log_the_plugin_steered_is_refused_stand_in_nccl_tests(cluster, capsys):
    _, log = _printed_chunk_run("steered", cluster, capsys, str(plugin.library_path()))
    sidecar, name = log.with_suffix(".yaml"), log.stem
    meta = yaml.safe_load(sidecar.read_text())
    for key in ("pinned", "policy", "policy_sha256"):
        del meta[key]
    sidecar.write_text(yaml.safe_dump(meta))
    with pytest.raises(PublishedRunError, match="shows DynamICCL's tuner plugin pinning its calls "
                       rf"\(policy {PIN_POLICY_PREFIX}{name}\) but its sidecar {name}.yaml records no pin"):
        load_sidecar(sidecar)
    meta.update(pinned={"algorithm": "nvls_tree", "protocol": "simple", "chunk_bytes": 16384},
                policy=f"{name}.dccl", policy_sha256="0" * 64, forced={"NCCL_ALGO": "Ring"})
    sidecar.write_text(yaml.safe_dump(meta))
    with pytest.raises(PublishedRunError, match="pins through the plugin and forces NCCL_ALGO"):
        load_sidecar(sidecar)
    meta.update(forced={}, pinned={"chunk": 16384})
    sidecar.write_text(yaml.safe_dump(meta))
    with pytest.raises(PublishedRunError, match="pinned names chunk, no knob of the plugin's"):
        load_sidecar(sidecar)


def test_a_plugin_note_at_warn_leaves_the_pin_and_any_other_warn_refuses_it_lines_as_printed():
    """The plugin's lines as it prints them (tuner.c, fleet.c): its note that aws-ofi-nccl's tuner
    is replaced changes nothing it pins; a WARN that it stepped aside on a rank refuses the log."""
    prefix = "host:1:1 [3] NCCL "
    sha = "a" * 64
    applied = [prefix + f"INFO DynamICCL: policy plan-pin:x (sha256 {sha}), 1 rules, for nRanks 16",
               prefix + "INFO DynamICCL decision: allreduce 1-2 B, nNodes 2 nRanks 16: ring/simple, "
                        "8 channels",
               prefix + "INFO DynamICCL chunk: allreduce ring/simple piece of 4096 B on 8 channel(s): "
                        "524288 -> 65536 B (logged when it changes)"]
    pinned = Choice(Algorithm.RING, Protocol.SIMPLE, 8, 65536)
    ofi = prefix + "WARN DynamICCL: the network plugin is aws-ofi-nccl (libnccl-net-ofi.so), ..."
    assert pin_problem([ofi, *applied], AR, pinned, sha, "2.30.7") is None
    aside = prefix + "WARN DynamICCL: policy file p has sha256 b, not the ... NCCL decides every call"
    assert pin_problem([*applied, aside], AR, pinned, sha).startswith(
        "the plugin stepped aside on a rank (NCCL WARN DynamICCL: policy file p")
    other_count = pin_problem(applied, AR, replace(pinned, channels=4), sha)
    assert "no `DynamICCL decision: allreduce ...: ring/simple, 4 channels` line" in other_count
    refused = [applied[0], applied[1] + " -- not usable here, NCCL's choice stands"]
    refusal = pin_problem(refused, AR, pinned, sha)
    assert "NCCL's cost table did not allow ring/simple" in refusal
    assert refusal.endswith("so move the log and its sidecar out of the measurements")


def test_a_printed_plans_files_before_its_launch_ran_are_skipped_with_a_note(tmp_path, monkeypatch,
                                                                         capsys):
    """A printed plan writes a chunk run's sidecar and pin policy before the line runs: a folder
    read then skips them, saying the launch has not run, and a pin policy left by a launch that
    failed (the script writes it just before) is named as such, not as an unknown format."""
    monkeypatch.chdir(tmp_path)
    assert main([*PLAN, "--logs", "pending"]) == 0
    name = chunk_run(capsys.readouterr().out.splitlines())
    folder = Path("pending")
    loaded = load_paths([folder])
    assert loaded.records == [] and loaded.skipped == [
        f"{folder / name}.yaml: the sidecar of {name}.txt, a launch pinned through the plugin that "
        "has not run yet (run its line from the plan)"]
    (folder / f"{name}.yaml").unlink()
    assert load_paths([folder]).skipped == [
        f"{folder / name}.dccl: the pin policy of {name}, a launch pinned through the plugin with "
        "no labelled log here (run it again from the plan)"]
