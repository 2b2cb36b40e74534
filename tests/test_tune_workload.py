"""``tune --workload job.jsonl``: the report's rows and the plan's launches weighed by a job's own
time per size (the mix ``dynamiccl profile job`` writes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.agents.shipping.tune_workload import Workload, decision_size
from dynamiccl.cli.main import main
from dynamiccl.profiler.formats import job_mix
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

#: Printed plans write a chunk-size launch's pin policy under ./logs: run where they may.
pytestmark = pytest.mark.usefixtures("in_tmp_cwd")

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"
#: A job on the fixture's 8-GPU node: most of its collective time in 70 KiB all-reduces, the rest
#: in 30 MiB ones (DDP's last, small bucket next to full ones, say).
JOB = ((70 << 10, 900, 40.0), (30 << 20, 10, 360.0))


def _job(path: Path, sizes=JOB) -> Path:
    entries = [job_mix.entry(Collective.ALLREDUCE, nbytes, 8, 1, Algorithm.RING, Protocol.LL, 8,
                             calls, calls, calls * time_us, np.full(calls, time_us), launch="job-t")
               for nbytes, calls, time_us in sizes]
    job_mix.write([e for e in entries if e is not None], path)
    return path


def test_each_size_counts_at_the_nearest_decision_size(tmp_path):
    assert [decision_size(n) for n in (1, 8, 11, 12, 70 << 10, 30 << 20, 1 << 40)] == \
        [8, 8, 8, 16, 64 << 10, 32 << 20, 1 << 34]
    w = Workload.read(_job(tmp_path / "job.jsonl"))
    assert w.total_us == pytest.approx(900 * 40 + 10 * 360)
    assert w.share(Collective.ALLREDUCE, 8, 64 << 10, 64 << 10) == pytest.approx(0.9090909)
    assert w.share(Collective.ALLREDUCE, 8, 8, 1 << 34) == pytest.approx(1.0)
    assert w.share(Collective.ALLREDUCE, 16, 8, 1 << 34) == 0.0
    assert w.shapes == {(1, 8)} and w.collectives == {Collective.ALLREDUCE}


def _plan(args: list[str], capsys) -> list[dict]:
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(REAL),
                 "--no-calibrate", "--plan", "--budget", "12", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_plan_measures_only_where_the_job_spends_its_time(tmp_path, capsys):
    job = _job(tmp_path / "job.jsonl")
    plain = _plan(["--collective", "allreduce"], capsys)
    weighed = _plan(["--workload", str(job)], capsys)
    assert {m["nbytes"] for m in plain} - {64 << 10, 32 << 20}, "the plain plan measures other sizes"
    assert weighed and {m["nbytes"] for m in weighed} <= {64 << 10, 32 << 20}
    assert {m["collective"] for m in weighed} == {"allreduce"}  # the job's collectives only


def test_the_report_gives_each_rows_share_of_the_jobs_time(tmp_path, capsys):
    job = _job(tmp_path / "job.jsonl")
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(REAL),
                 "--no-calibrate", "--workload", str(job), "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert sum(r["job_share"] for r in rows) == pytest.approx(1.0, abs=1e-3)
    at_64k = next(r for r in rows if r["from"] <= 64 << 10 <= r["to"])
    assert at_64k["job_share"] >= 0.909 - 1e-3
    assert all(r["job_share"] == 0 for r in rows if not (r["from"] <= 64 << 10 <= r["to"]
                                                         or r["from"] <= 32 << 20 <= r["to"]))
    assert f"the job ({job})" in captured.err and "predicted saving" in captured.err
    assert "tune does not decide here" not in captured.err


def test_a_job_on_another_shape_is_decided_there(tmp_path, capsys):
    """The job ran on 2 nodes of 8: tune decides that shape too (the topology resized)."""
    job = tmp_path / "job.jsonl"
    entries = [job_mix.entry(Collective.ALLGATHER, 1 << 20, 16, 2, Algorithm.RING, Protocol.SIMPLE,
                             4, 5, 5, 500.0, np.full(5, 100.0), launch="job-t")]
    job_mix.write(entries, job)
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(REAL),
                 "--no-calibrate", "--workload", str(job), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["collective"], r["nodes"], r["ranks"]) for r in rows if r["job_share"] > 0} == \
        {("allgather", 2, 16)}


@pytest.mark.parametrize("content", ["", "not json\n", '{"collective": "allreduce"}\n',
                                     "runs.jsonl"])
def test_a_file_that_is_not_a_job_mix_is_one_line(tmp_path, capsys, content):
    path = tmp_path / "job.jsonl"
    if content == "runs.jsonl":  # measurement records without the job's counts
        from dynamiccl.profiler.formats.records import read_jsonl, write_jsonl

        write_jsonl(read_jsonl(_job(tmp_path / "j.jsonl")), path)
    else:
        path.write_text(content)
    assert main(["tune", "--topology", "dgx_h100", "--workload", str(path), "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(path) in err and "\n" not in err and ("job" in err)
