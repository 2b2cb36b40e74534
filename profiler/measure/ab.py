"""A/B launches of a user's own job: NCCL's default against a policy, interleaved, same command.

A policy is worth shipping only where the job itself runs faster with it, launch after launch on
the real cluster. So the job's command is launched again and again, the only difference being the
environment that loads the policy (``NCCL_TUNER_PLUGIN``, ``DYNAMICCL_POLICY`` and its expected
checksum): one launch of each per pair, the order alternating from pair to pair (default, policy;
policy, default; ...) so that a drift over the session (clocks, a neighbour's job) falls on both
sides alike. A launch is scored by its wall time, or by the last number a regular expression finds
in its output (a step time the job prints); the comparison is per pair (policy / default), so the
session's drift cancels within a pair, and the verdict is said only beyond the spread of the pairs:
faster where every pair was faster, slower where every pair was slower, no difference otherwise.

A launcher that does not hand its environment on (OpenMPI's ``mpirun`` forwards only what ``-x``
names, MPICH's Hydra what ``-genv`` names) gets the variables on its command line
(:func:`command_for`); srun (``--export=ALL``, its default), torchrun and a plain script inherit them.
"""

from __future__ import annotations

import math
import os
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The two sides of a comparison.
DEFAULT, POLICY = "default", "policy"
#: Pairs at least for a verdict: fewer say nothing beyond their noise.
MIN_PAIRS_FOR_VERDICT = 3
#: Seconds a stopped launch gets after SIGINT/SIGTERM before SIGKILL.
GRACE_S = 10.0
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
    status: int
    log: str


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


def score_of(output: str, seconds: float, metric: re.Pattern[str] | None) -> float | None:
    """The launch's score: wall seconds, or the last match of ``metric``'s first group (None where
    it matches nothing or not a number)."""
    if metric is None:
        return seconds
    found = metric.findall(output)
    if not found:
        return None
    last = found[-1]
    try:
        value = float(last[0] if isinstance(last, tuple) else last)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def run(launch: Launch, base_env: dict[str, str], log: Path, *, timeout_s: float | None,
        metric: re.Pattern[str] | None) -> Result:
    """Runs one launch, its output (stdout and stderr) to ``log`` (written whole: ``log.part``
    until the launch ends). KeyboardInterrupt stops the launch's whole session and propagates;
    a launch past ``timeout_s`` is stopped and scored as failed (status 124)."""
    env = {k: v for k, v in base_env.items() if k not in launch.unset_env} | launch.set_env
    part = log.with_name(log.name + ".part")
    began = time.monotonic()
    with open(part, "wb") as out:
        proc = subprocess.Popen(list(launch.command), env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(proc, signal.SIGTERM)
            status = 124
        except KeyboardInterrupt:
            stop(proc, signal.SIGINT)
            raise
    seconds = time.monotonic() - began
    os.replace(part, log)
    output = log.read_text(errors="replace") if metric is not None else ""
    score = score_of(output, seconds, metric) if status == 0 else None
    return Result(launch.index, launch.pair, launch.side, seconds, score, status, str(log))


def stop(proc: subprocess.Popen, first: signal.Signals) -> None:
    """``first`` to the launch's whole session, then SIGKILL after :data:`GRACE_S`."""
    for sig in (first, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


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
    """``policy faster``/``policy slower`` where every pair says so, ``no difference beyond the
    spread`` otherwise; too few pairs say nothing."""
    if len(ratios) < MIN_PAIRS_FOR_VERDICT:
        return f"too few pairs for a verdict ({len(ratios)}; {MIN_PAIRS_FOR_VERDICT} at least)"
    better = max(ratios) < 1 if lower_is_better else min(ratios) > 1
    worse = min(ratios) > 1 if lower_is_better else max(ratios) < 1
    median = statistics.median(ratios)
    change = (1 - median if lower_is_better else median - 1) * 100
    if better:
        return f"policy faster by {change:.1f}% (median of the pairs; every pair faster)"
    if worse:
        return f"policy slower by {-change:.1f}% (median of the pairs; every pair slower)"
    return (f"no difference beyond the spread (median {change:+.1f}%, pairs "
            f"{_pct(min(ratios), lower_is_better)} to {_pct(max(ratios), lower_is_better)})")


def _pct(ratio: float, lower_is_better: bool) -> str:
    return f"{(1 - ratio if lower_is_better else ratio - 1) * 100:+.1f}%"


def run_all(launches: Sequence[Launch], base_env: dict[str, str], out: Path, *,
            timeout_s: float | None, metric: re.Pattern[str] | None,
            done: Callable[[list[Result]], None], progress: Callable[[str], None]) -> list[Result]:
    """Every launch in order, ``done`` called with the results so far after each (so a session
    stopped midway keeps what it measured); stops at the first launch that fails."""
    results: list[Result] = []
    for launch in launches:
        log = out / f"launch_{launch.index + 1:02d}_{launch.side}.log"
        progress(f"launch {launch.index + 1}/{len(launches)} ({launch.side}) ...")
        result = run(launch, base_env, log, timeout_s=timeout_s, metric=metric)
        results.append(result)
        done(results)
        score = "no score" if result.score is None else f"score {result.score:.6g}"
        progress(f"launch {launch.index + 1}/{len(launches)} ({launch.side}): {result.seconds:.1f} s, "
                 f"{score}, exit {result.status}")
        if result.status != 0 or result.score is None:
            break
    return results
