"""A/B launches of a user's own job: NCCL's default against a policy, interleaved, same command.

A policy is worth shipping only where the job itself runs faster with it, launch after launch on
the real cluster. So the job's command is launched again and again, the only difference being the
environment that loads the policy (``NCCL_TUNER_PLUGIN``, ``DYNAMICCL_POLICY`` and its expected
checksum): one launch of each per pair, the order alternating from pair to pair (default, policy;
policy, default; ...) so that a drift over the session (clocks, a neighbour's job) falls on both
sides alike. A launch is scored by its wall time, or by the last number a regular expression finds
in its output (a step time the job prints); the comparison is per pair (policy / default), so the
session's drift cancels within a pair, and the verdict is said only beyond the spread of the pairs:
faster where every pair was faster and the pairs' 95 % confidence interval of the change (Student's
t on their log ratios) lies wholly on the faster side, slower likewise, no difference otherwise. The
interval is what makes a verdict mean something with few pairs: on two identical sides, noise alone
makes each of 3 pairs point the same way one time in four, 5 pairs one time in sixteen.

A launcher that does not hand its environment on (OpenMPI's ``mpirun`` forwards only what ``-x``
names, MPICH's Hydra what ``-genv`` names) gets the variables on its command line
(:func:`command_for`); srun (``--export=ALL``, its default), torchrun and a plain script inherit them.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dynamiccl.profiler.measure.job_process import (
    GRACE_S,
    JobProcess,
    Stops,
    stopped_status,
    supervise,
)
from dynamiccl.profiler.measure.kept_output import KeptOutput, Pump

#: The two sides of a comparison.
DEFAULT, POLICY = "default", "policy"
#: Pairs at least for a verdict: fewer say nothing beyond their noise.
MIN_PAIRS_FOR_VERDICT = 3
#: Student's t, two-sided 95 % (its 0.975 quantile), by degrees of freedom (pairs - 1): 1..30; more
#: pairs take the last (the normal's 1.96 is within 4 % of it).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)
LAUNCHERS = ("env", "openmpi", "mpich")


@dataclass(frozen=True)
class Launch:
    """One launch to run: its place, its side and its exact command and environment changes."""

    index: int
    pair: int
    side: str
    command: tuple[str, ...]
    #: Variables set for the launch (the policy side's) and variables removed (the default side's).
    set_env: dict[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()

    def shell(self) -> str:
        """The launch as one shell line (``env -u X ... VAR=value ... CMD``)."""
        import shlex

        words = ["env", *[w for name in self.unset_env for w in ("-u", name)],
                 *[f"{k}={v}" for k, v in self.set_env.items()], *self.command]
        return shlex.join(words)


@dataclass
class Result:
    index: int
    pair: int
    side: str
    seconds: float
    #: The launch's score: its wall seconds, or the number ``metric`` found in its output.
    score: float | None
    #: As a shell reports it: the command's exit status, 128 + the signal that killed it, 124
    #: after the timeout, 128 + the signal dynamiccl received that stopped it.
    status: int
    log: str
    #: Why the launch was stopped before it ended on its own, in words ("" when it was not).
    stopped: str = ""
    #: The plugin's warnings in a policy launch's output (:class:`OutputChecks`).
    plugin_warnings: list[str] = field(default_factory=list)
    #: Bytes the launch printed, and how many of them its log leaves out (its middle).
    output_bytes: int = 0
    left_out_bytes: int = 0


def policy_env(plugin: str | Path, policy: str | Path, sha256: str, *, policy_var: str,
               sha_var: str, plugin_var: str) -> dict[str, str]:
    """What loads the policy: the plugin, the file (absolute: ranks start elsewhere) and its hash."""
    return {plugin_var: str(plugin), policy_var: str(Path(policy).resolve()), sha_var: sha256}


def command_for(command: Sequence[str], launcher: str, env: dict[str, str]) -> tuple[str, ...]:
    """``command`` with ``env`` handed on by ``launcher`` where it does not forward its own
    environment: OpenMPI ``-x NAME``, MPICH/Intel MPI ``-genv NAME value``, right after the
    launcher's own word (``mpirun``); ``env``: nothing added."""
    words = list(command)
    if launcher == "env" or not env:
        return tuple(words)
    if launcher == "openmpi":
        extra = [w for name in env for w in ("-x", name)]
    elif launcher == "mpich":
        extra = [w for name, value in env.items() for w in ("-genv", name, value)]
    else:
        raise ValueError(f"launcher {launcher!r} is none of {', '.join(LAUNCHERS)}")
    return (words[0], *extra, *words[1:])


def plan(command: Sequence[str], pairs: int, policy_vars: dict[str, str], launcher: str,
         drop: Sequence[str]) -> list[Launch]:
    """``pairs`` pairs of launches, the order alternating (pair 0: default then policy, pair 1:
    policy then default, ...). Default launches drop ``drop`` (every variable that would load a
    policy); policy launches set ``policy_vars``."""
    out: list[Launch] = []
    for pair in range(pairs):
        order = (DEFAULT, POLICY) if pair % 2 == 0 else (POLICY, DEFAULT)
        for side in order:
            if side == POLICY:
                out.append(Launch(len(out), pair, side, command_for(command, launcher, policy_vars),
                                  dict(policy_vars), ()))
            else:
                out.append(Launch(len(out), pair, side, tuple(command), {}, tuple(drop)))
    return out


def _number(found: str | tuple[str, ...]) -> float | None:
    try:
        value = float(found[0] if isinstance(found, tuple) else found)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


#: What the plugin's own warnings start with in NCCL's log (``NCCL WARN DynamICCL: ...``).
PLUGIN_WARNING = "DynamICCL:"
#: Plugin warnings kept per launch.
MAX_WARNINGS = 3


class OutputChecks:
    """What the A/B reads in a launch's output, a line at a time as the job prints it (a job may
    print gigabytes, and its log keeps only their beginning and end): the last match of ``metric``
    (the score), and the plugin's warnings (it defers when the policy does not hold for the NCCL
    that runs, or the file is not the one the checksum names), each once; NCCL prints them where
    ``NCCL_DEBUG`` is WARN or INFO. Both sides' launches are read alike, as the reading runs while
    they are timed."""

    def __init__(self, metric: re.Pattern[str] | None) -> None:
        self.metric = metric
        self._last: str | tuple[str, ...] | None = None
        self._warnings: dict[str, None] = {}

    def lines(self, batch: list[str]) -> None:
        """Consecutive lines of the output."""
        if self.metric is not None:
            for line in reversed(batch):  # the batch's last match is its last matching line's
                found = self.metric.findall(line)
                if found:
                    self._last = found[-1]
                    break
        for line in batch:
            at = line.find(PLUGIN_WARNING)
            if at >= 0 and "WARN" in line[:at] and len(self._warnings) < MAX_WARNINGS:
                self._warnings[line[at:].strip()] = None

    def score(self, seconds: float) -> float | None:
        """The launch's wall ``seconds``, or the last number the metric found (its first group;
        None where it found nothing or not a number)."""
        if self.metric is None:
            return seconds
        return None if self._last is None else _number(self._last)

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings)


class CannotStart(Exception):
    """A launch's command could not be started (not found, not executable): one line naming it."""


#: Bytes of a launch's output its log keeps by default: the first and the last half of them.
KEEP_BYTES = 16 << 20
#: Seconds the output of a launch that ended is read on for (a process that escaped the launch may
#: hold its pipe open).
DRAIN_S = 5.0


def run(launch: Launch, base_env: dict[str, str], log: Path, stops: Stops, *,
        timeout_s: float | None, metric: re.Pattern[str] | None, keep_bytes: int = KEEP_BYTES,
        grace_s: float = GRACE_S, poll_s: float = 0.1) -> Result:
    """Runs one launch in a session of its own (:class:`~dynamiccl.profiler.measure.job_process.
    JobProcess`), its output (stdout and stderr) read through a pipe as it comes: scored and
    searched for the plugin's warnings line by line (:class:`OutputChecks`), its first and last
    ``keep_bytes / 2`` kept in ``log`` (:class:`~dynamiccl.profiler.measure.kept_output.KeptOutput`:
    a hidden file beside it until the launch ends; one line there says what was left out between).
    A signal ``stops`` caught is passed on to every process of the launch, which ends (SIGTERM
    shortly after another signal, SIGKILL after ``grace_s`` or at a second signal); a launch past
    ``timeout_s`` is stopped likewise and scored as failed (status 124); what a launch left running
    is ended with it. Raises :class:`CannotStart` when the command cannot be started."""
    env = {k: v for k, v in base_env.items() if k not in launch.unset_env} | launch.set_env
    checks = OutputChecks(metric)
    fd, part = tempfile.mkstemp(prefix=f".{log.name}.", suffix=".part", dir=log.parent)
    began = time.monotonic()
    try:
        with os.fdopen(fd, "wb") as out:
            kept = KeptOutput(out, keep_bytes, checks.lines)
            read_end, write_end = os.pipe()
            try:
                with os.fdopen(write_end, "wb") as pipe:  # the job's only: closed here once it has it
                    job = JobProcess(launch.command, env, grace_s, output=pipe)
            except OSError as exc:
                os.close(read_end)
                raise CannotStart(f"cannot start {launch.command[0]}: {exc.strerror or exc}") from None
            pump = Pump(read_end, kept)
            pump.start()
            stops.attach(job)
            ending = supervise(job, began=began, timeout_s=timeout_s, poll_s=poll_s)
            seconds = time.monotonic() - began
            pump.finish(DRAIN_S)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(part, 0o666 & ~umask)  # a log of the user's, not mkstemp's private file
        os.replace(part, log)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise
    status, stopped = stopped_status(job, ending, timeout_s=timeout_s, signals=len(stops.received))
    score = checks.score(seconds) if status == 0 else None
    return Result(launch.index, launch.pair, launch.side, seconds, score, status, str(log), stopped,
                  checks.warnings if launch.side == POLICY else [], kept.total, kept.left_out)


@dataclass(frozen=True)
class Side:
    median: float
    low: float
    high: float
    launches: int


@dataclass(frozen=True)
class Summary:
    """Both sides' medians with their spread (the launches' least and greatest score), the pairs'
    ratios policy / default, and the verdict."""

    default: Side | None
    policy: Side | None
    ratios: tuple[float, ...]
    verdict: str

    @property
    def median_ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    def to_json(self) -> dict:
        return {"default": None if self.default is None else asdict(self.default),
                "policy": None if self.policy is None else asdict(self.policy),
                "pair_ratios": [round(r, 6) for r in self.ratios],
                "median_ratio": None if self.median_ratio is None else round(self.median_ratio, 6),
                "verdict": self.verdict}


def summarize(results: Sequence[Result], lower_is_better: bool = True) -> Summary:
    """Medians, spreads and the verdict of the complete pairs of ``results`` (a pair with a
    failed or unscored launch is left out)."""
    sides = {}
    for side in (DEFAULT, POLICY):
        scores = [r.score for r in results if r.side == side and r.score is not None]
        sides[side] = Side(statistics.median(scores), min(scores), max(scores), len(scores)) \
            if scores else None
    by_pair: dict[int, dict[str, float]] = {}
    for r in results:
        if r.score is not None:
            by_pair.setdefault(r.pair, {})[r.side] = r.score
    ratios = tuple(p[POLICY] / p[DEFAULT] for _, p in sorted(by_pair.items())
                   if len(p) == 2 and p[DEFAULT] > 0)
    return Summary(sides[DEFAULT], sides[POLICY], ratios, verdict(ratios, lower_is_better))


def verdict(ratios: Sequence[float], lower_is_better: bool = True) -> str:
    """``policy faster``/``policy slower`` where every pair says so and so does the pairs' 95 %
    confidence interval of the change (:func:`change_interval`), ``no difference beyond the
    spread`` otherwise; too few pairs say nothing."""
    if len(ratios) < MIN_PAIRS_FOR_VERDICT:
        return f"too few pairs for a verdict ({len(ratios)}; {MIN_PAIRS_FOR_VERDICT} at least)"
    low, high = change_interval(ratios)
    better = max(ratios) < 1 and high < 1 if lower_is_better else min(ratios) > 1 and low > 1
    worse = min(ratios) > 1 and low > 1 if lower_is_better else max(ratios) < 1 and high < 1
    median = statistics.median(ratios)
    change = (1 - median if lower_is_better else median - 1) * 100
    interval = f"95 % interval {_span(low, high, lower_is_better)}"
    if better:
        return f"policy faster by {change:.1f}% (median of the pairs; every pair faster, {interval})"
    if worse:
        return f"policy slower by {-change:.1f}% (median of the pairs; every pair slower, {interval})"
    return (f"no difference beyond the spread (median {change:+.1f}%, pairs "
            f"{_span(min(ratios), max(ratios), lower_is_better)}, {interval})")


def change_interval(ratios: Sequence[float]) -> tuple[float, float]:
    """The 95 % confidence interval of the pairs' typical ratio (policy / default): Student's t on
    their log ratios (a ratio's noise is relative, and a pair's launches share the session's
    drift, so the pairs are the independent samples)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = T_975[min(len(logs) - 1, len(T_975)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean + half)


def _span(low: float, high: float, lower_is_better: bool) -> str:
    """Two ratios as changes in the policy's favour (+: better), the smaller first."""
    a, b = sorted((1 - r if lower_is_better else r - 1) * 100 for r in (low, high))
    return f"{a:+.1f}% to {b:+.1f}%"


def run_all(launches: Sequence[Launch], base_env: dict[str, str], out: Path, stops: Stops, *,
            timeout_s: float | None, metric: re.Pattern[str] | None,
            done: Callable[[list[Result]], None], progress: Callable[[str], None],
            keep_bytes: int = KEEP_BYTES) -> list[Result]:
    """Every launch in order, ``done`` called with the results so far after each (so a session
    stopped midway keeps what it measured); stops at the first launch that fails, and at a signal
    ``stops`` caught (the launch running then is stopped and kept, with how it was stopped; no
    launch starts after it)."""
    results: list[Result] = []
    for launch in launches:
        if stops.received:
            break
        log = out / f"launch_{launch.index + 1:02d}_{launch.side}.log"
        progress(f"launch {launch.index + 1}/{len(launches)} ({launch.side}) ...")
        result = run(launch, base_env, log, stops, timeout_s=timeout_s, metric=metric,
                     keep_bytes=keep_bytes)
        results.append(result)
        done(results)
        score = "no score" if result.score is None else f"score {result.score:.6g}"
        cut = (f", {result.left_out_bytes / 2**20:.1f} MiB of its {result.output_bytes / 2**20:.1f} MiB "
               "of output left out of its log" if result.left_out_bytes else "")
        progress(f"launch {launch.index + 1}/{len(launches)} ({launch.side}): {result.seconds:.1f} s, "
                 f"{score}, exit {result.status}" + (f", {result.stopped}" if result.stopped else "")
                 + cut)
        if result.status != 0 or result.score is None:
            break
    return results
