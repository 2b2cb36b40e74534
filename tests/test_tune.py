"""``dynamiccl tune``: measurements decide, the plan measures what can change a decision."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from dynamiccl.agents.tune import (
    DEFAULT,
    DEFAULT_NOISE,
    Choice,
    Measurements,
    PlannedMeasurement,
    TunedPolicy,
    Tuner,
    _model_time,
    command_lines,
    plan,
)
from dynamiccl.cli.main import main
from dynamiccl.knobs import Algorithm, Collective, Protocol
from dynamiccl.profiler.records import MeasurementRecord, write_jsonl
from dynamiccl.scenario import Scenario
from dynamiccl.topology import load_topology

TOPO = load_topology("dgx_h100", nodes=1)
NVLS = Choice(Algorithm.NVLS, Protocol.SIMPLE)
RING_LL = Choice(Algorithm.RING, Protocol.LL)
REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"


def record(s: Scenario, choice: Choice, time_us: float) -> MeasurementRecord:
    return MeasurementRecord(
        s.collective.name.lower(), s.nbytes, s.topology.nranks, time_us, 1.0, 1.0,
        algorithm=None if choice.algorithm is None else choice.algorithm.name.lower(),
        protocol=None if choice.protocol is None else choice.protocol.name.lower(),
        channels=choice.channels, nnodes=s.topology.nodes)


def at(nbytes: int) -> Scenario:
    return Scenario(TOPO, Collective.ALLREDUCE, nbytes)


def test_without_measurements_the_uncertain_model_leaves_nccl_alone():
    d = Tuner(TOPO, Measurements([])).decide(at(1 << 20))
    assert d.chosen == DEFAULT and d.verdict.evidence == "model"
    assert not d.verdict.override


def test_a_measured_pair_decides_whatever_the_model_says():
    s = at(1 << 20)
    model_nvls = _model_time(s, NVLS)
    records = [record(s, DEFAULT, 100.0), record(s, NVLS, 70.0), record(s, RING_LL, 130.0)]
    d = Tuner(TOPO, Measurements(records)).decide(s)
    assert d.chosen == NVLS and d.verdict.evidence == "measured"
    assert abs(d.verdict.gain - (100 / 70 - 1)) < 1e-9
    assert d.estimates[NVLS].time_us == 70.0 != model_nvls
    slower = [record(s, DEFAULT, 100.0), record(s, NVLS, 120.0)]
    d = Tuner(TOPO, Measurements(slower)).decide(s)
    assert d.chosen == DEFAULT  # measured slower: NCCL keeps the call, whatever the model thinks


def test_a_measured_gain_within_the_noise_is_not_trusted():
    s = at(1 << 20)
    noisy = [record(s, DEFAULT, 100.0), record(s, NVLS, 97.0)]
    assert Tuner(TOPO, Measurements(noisy)).decide(s).chosen == DEFAULT


def test_the_in_place_column_tells_the_noise_of_a_single_run():
    s = at(1 << 20)
    calls = [record(s, DEFAULT, 100.0), record(s, NVLS, 96.0),
             *(record(at(1 << k), DEFAULT, 50.0) for k in range(10, 20))]

    def with_in_place(factor: float) -> Measurements:
        return Measurements(calls + [replace(r, in_place=True, time_us=r.time_us * factor) for r in calls])

    assert Measurements(calls).noise == DEFAULT_NOISE  # nothing repeats: a 4 % gain is not trusted
    assert Tuner(TOPO, Measurements(calls)).decide(s).chosen == DEFAULT
    steady = with_in_place(1.004)  # the second timing agrees: the 4 % gain is real
    assert steady.noise == 0.01 and Tuner(TOPO, steady).decide(s).chosen == NVLS
    shaky = with_in_place(1.08)
    assert shaky.noise > DEFAULT_NOISE and Tuner(TOPO, shaky).decide(s).chosen == DEFAULT


def test_a_replay_table_tells_its_own_noise_through_its_in_place_column():
    from dynamiccl.profiler.measurements import load

    replay = Path(__file__).parent / "fixtures" / "real" / "replay"
    steady, shaky = load(replay / "h100_nvswitch_node.csv"), load(replay / "rtx5090_socket_2ranks.csv")
    assert Measurements([r for r in steady if not r.in_place]).noise == DEFAULT_NOISE
    assert Measurements(steady).noise < 0.02  # an NVSwitch node times each call twice alike
    assert Measurements(shaky).noise > DEFAULT_NOISE  # two ranks on one GPU over sockets do not


def test_measurements_of_a_choice_correct_the_model_at_nearby_sizes():
    sizes = [1 << k for k in range(18, 23)]
    records = [record(at(n), p, f * _model_time(at(n), p))
               for n in sizes for p, f in ((DEFAULT, 1.0), (NVLS, 0.6))]
    tuner = Tuner(TOPO, Measurements(records))
    between = at(3 << 19)
    est = tuner.estimate(between, NVLS)
    assert est.evidence == "calibrated model"
    assert abs(est.time_us / _model_time(between, NVLS) - 0.6) < 0.05
    assert tuner.decide(between).chosen == NVLS
    far = tuner.estimate(at(1 << 33), NVLS)
    assert far.evidence == "model"  # too far from anything measured: no correction claimed


def test_plan_measures_first_the_pair_whose_measurement_changes_a_decision():
    """The plan's first two measurements (a pair and NCCL's default at one size) are enough to
    flip that size's decision when the measurement shows the predicted gain is real."""
    scenarios = [at(1 << k) for k in range(10, 31)]
    tuner = Tuner(TOPO, Measurements([]))
    planned = plan(tuner, scenarios, 2)
    assert len(planned) == 2
    assert {m.choice.is_default for m in planned} == {True, False}
    assert planned[0].nbytes == planned[1].nbytes
    target = at(planned[0].nbytes)
    pair = next(m.choice for m in planned if not m.choice.is_default)
    assert tuner.decide(target).chosen == DEFAULT
    truth = {DEFAULT: _model_time(target, DEFAULT), pair: 0.5 * _model_time(target, DEFAULT)}
    measured = Tuner(TOPO, Measurements([record(target, p, t) for p, t in truth.items()]))
    assert measured.decide(target).chosen == pair
    values = [m.value for m in plan(tuner, scenarios, 50)]
    assert values == sorted(values, reverse=True)


def test_command_lines_pin_nccl_and_merge_consecutive_sizes():
    items = [PlannedMeasurement(Collective.ALLREDUCE, 8, NVLS, n, 1.0, "") for n in
             (1 << 20, 1 << 21, 1 << 22, 1 << 25)]
    items.append(PlannedMeasurement(Collective.ALLGATHER, 8, DEFAULT, 1 << 10, 1.0, ""))
    lines = command_lines(items, gpus_per_node=8)
    assert lines[0].startswith("all_gather_perf -b 1024 -e 1024 -f 2 -g 8")
    assert lines[1].startswith("NCCL_ALGO=NVLS NCCL_PROTO=Simple all_reduce_perf -b 1048576 "
                               "-e 4194304 -f 2 -g 8")
    assert "-b 33554432 -e 33554432" in lines[2]


def _launched_environment(line: str) -> tuple[str, dict[str, str]]:
    """(launcher named in the comment, variables the line sets on every rank), read as MPI reads
    the line: OpenMPI's ``-x VAR=value`` and Hydra's ``-genv VAR value``; nothing before mpirun."""
    import shlex

    command, _, comment = line.partition("  # ")
    words = shlex.split(command)
    assert words[0] == "mpirun", f"a variable set before mpirun reaches the local ranks only: {line}"
    env, i = {}, 0
    while i < len(words):
        if words[i] == "-x":
            key, _, value = words[i + 1].partition("=")
            env[key], i = value, i + 2
        elif words[i] == "-genv":
            env[words[i + 1]], i = words[i + 2], i + 3
        else:
            i += 1
    return comment.split(":")[0], env


def test_multi_node_command_lines_set_the_variables_on_every_rank_for_each_launcher():
    """Issue 23: `NCCL_ALGO=Ring mpirun -np 16 -N 8 ...` leaves OpenMPI's remote ranks on NCCL's own
    algorithm, and ranks that choose differently hang NCCL."""
    pinned = Choice(Algorithm.RING, Protocol.LL, 4)
    items = [PlannedMeasurement(Collective.ALLREDUCE, 16, choice, 1 << 20, 1.0, "")
             for choice in (DEFAULT, pinned)]
    lines = command_lines(items, gpus_per_node=8)
    assert len(lines) == 4
    launched = [_launched_environment(line) for line in lines]
    assert [name for name, _ in launched] == ["OpenMPI", "MPICH/Intel MPI"] * 2
    assert [env for _, env in launched[:2]] == [{}, {}]
    want = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4"}
    assert [env for _, env in launched[2:]] == [want, want]
    assert all("-np 16" in line and "-g 1" in line for line in lines)
    assert "-N 8" in lines[2] and "-ppn 8" in lines[3]


def test_tune_cli_writes_a_gated_policy_and_plans(tmp_path, capsys):
    s = at(1 << 20)
    logs = tmp_path / "runs.jsonl"
    write_jsonl([record(s, DEFAULT, 100.0), record(s, NVLS, 60.0)], logs)
    out = tmp_path / "tuned.dccl"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(logs),
                 "--collective", "allreduce", "--no-calibrate", "-o", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    measured = [r for r in rows if r["evidence"] == "measured"]
    assert measured and measured[0]["ours"] == "nvls/simple"
    assert main(["show", str(out), "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    hit = [r for r in rules if r["nodes"] == 1 and r["min_bytes"] <= s.nbytes < r["max_bytes"]]
    assert hit[0]["algorithm"] == "nvls" and hit[0]["channels"] is None
    assert hit[0]["evidence"] in ("measured", "calibrated model")  # the range's weakest call
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(logs),
                 "--collective", "allreduce", "--no-calibrate", "--plan", "--budget", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert 1 <= len(lines) <= 4 and all("all_reduce_perf" in line for line in lines)
    assert main(["tune", "--topology", "dgx_h100", "--plan", "--budget", "0"]) == 2


def test_tune_calibrates_on_real_logs_by_default(tmp_path, capsys):
    """Calibration is on unless --no-calibrate: tune, and its plan, fit the model to the logs."""
    logs = ["--measurements", str(REAL / "all_reduce_default.txt"),
            "--measurements", str(REAL / "all_reduce_ring.txt")]
    out = tmp_path / "t.dccl"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", *logs, "--collective",
                 "allreduce", "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert "model: calibrated" in captured.err and out.is_file()
    assert json.loads(captured.out)[0]["evidence"] == "calibrated model"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", *logs, "--collective",
                 "allreduce", "--plan", "--budget", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert 1 <= len(lines) <= 4 and all("all_reduce_perf" in line for line in lines)


def test_tune_reads_a_folder_of_logs_with_sidecars_and_skips_other_files(tmp_path, capsys):
    """The fixture layout (logs, their .yaml sidecars, topology.yaml, system.yaml): the sidecars
    say which runs were forced, so NCCL_ALGO=RING runs are not taken for NCCL's default."""
    out = tmp_path / "t.dccl"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(REAL),
                 "--no-calibrate", "--collective", "allreduce", "-o", str(out), "--json"]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 file(s) holding no measurements" in err and "topology.yaml" in err
    assert "116 measurements" in err and out.is_file()


def test_a_measured_channel_pin_is_weighed_and_written_with_its_channels():
    s = at(1 << 20)
    pinned = Choice(Algorithm.NVLS, Protocol.SIMPLE, 8)
    tuner = Tuner(TOPO, Measurements([record(s, DEFAULT, 100.0), record(s, pinned, 60.0),
                                      record(s, NVLS, 90.0)]))
    d = tuner.decide(s)
    assert d.chosen == pinned and d.verdict.evidence == "measured"
    rule, _ = TunedPolicy(tuner).decide_rule(s)
    assert (rule.algorithm, rule.protocol, rule.channels) == (Algorithm.NVLS, Protocol.SIMPLE, 8)
    # never proposed by the model alone: without that measurement no candidate pins channels
    assert all(c.channels is None for c in Tuner(TOPO, Measurements([])).decide(s).estimates)


def test_a_plan_for_a_channel_pin_sets_nccl_min_and_max_nchannels():
    pinned = Choice(Algorithm.RING, Protocol.LL128, 4)
    lines = command_lines([PlannedMeasurement(Collective.ALLREDUCE, 8, pinned, 1 << 16, 1.0, "")],
                          gpus_per_node=8)
    assert lines[0].startswith("NCCL_ALGO=Ring NCCL_PROTO=LL128 NCCL_MIN_NCHANNELS=4 "
                               "NCCL_MAX_NCHANNELS=4 all_reduce_perf -b 65536 -e 65536")
    # the plan asks for a measured channel pin at the sizes next to where it was measured
    s = at(1 << 16)
    measured = [record(s, DEFAULT, 100.0), record(s, pinned, 50.0)]
    planned = plan(Tuner(TOPO, Measurements(measured)), [at(1 << 15), s, at(1 << 17)], 50)
    assert any(m.choice == pinned and m.nbytes != s.nbytes for m in planned)


def test_tune_overrides_only_where_measurements_anchor_both_sides():
    # NVLS measured far faster than NCCL's default up to 4 MiB, NCCL's default never near 16 MiB
    sizes = [1 << k for k in range(18, 23)]
    records = [record(at(n), DEFAULT, _model_time(at(n), DEFAULT)) for n in sizes[:2]]
    records += [record(at(n), NVLS, 0.5 * _model_time(at(n), NVLS)) for n in sizes]
    tuner = Tuner(TOPO, Measurements(records))
    far_default = at(1 << 24)
    d = tuner.decide(far_default)
    assert d.estimates[DEFAULT].model_only and not d.estimates[NVLS].model_only
    assert d.chosen == DEFAULT  # the model alone speaks for NCCL's default there
    # a choice only the model speaks for never overrides a measured default, however fast it looks
    only_model = [record(at(1 << 20), DEFAULT, 10.0 * _model_time(at(1 << 20), DEFAULT))]
    d = Tuner(TOPO, Measurements(only_model)).decide(at(1 << 20))
    assert d.estimates[DEFAULT].evidence == "measured" and d.chosen == DEFAULT


def test_a_calibrated_model_keeps_a_choice_corrected_by_its_own_measurements():
    # with a fitted model (calibrated=True) an estimate corrected by the choice's own measurements
    # is that choice's time, not rescaled again by the model's ratio to NCCL's default
    sizes = [1 << k for k in range(18, 23)]
    records = [record(at(n), p, f * _model_time(at(n), p))
               for n in sizes for p, f in ((DEFAULT, 1.0), (NVLS, 0.6))]
    tuner = Tuner(TOPO, Measurements(records), calibrated=True)
    between = at(3 << 19)
    d = tuner.decide(between)
    assert not d.estimates[NVLS].model_only
    assert abs(d.estimates[NVLS].time_us / _model_time(between, NVLS) - 0.6) < 0.05
