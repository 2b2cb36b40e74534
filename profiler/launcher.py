"""Starts N local ranks of a function and never waits forever for them.

A distributed run has two classic ways to hang a terminal: one rank dies and the others block in
the next collective, or one rank stalls. The launcher watches every rank, stops the rest as soon as
one fails, and gives up after a deadline, raising :class:`LaunchError` that names the rank and what
it said. Ranks rendezvous through a fresh ``FileStore`` in a private temporary directory, so nothing
listens on a network port and parallel test runs cannot collide.

Each rank is a fresh interpreter started with the environment already in place
(``OMP_NUM_THREADS=1``, NCCL knobs), because torch and NCCL read it when they load.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Environment every rank gets unless the caller overrides it: one thread per rank, because ranks
#: share the machine's cores and oversubscription would show up as fake stragglers.
BASE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_POLL_S = 0.02
_GRACE_S = 1.0


class LaunchError(RuntimeError):
    """A rank failed, hung or vanished; the message says which and why."""


@dataclass(frozen=True)
class RankContext:
    """What a rank function receives: who it is and how to reach the others."""

    rank: int
    world_size: int
    #: ``file://…`` URL for ``torch.distributed.init_process_group(init_method=...)``.
    init_method: str
    #: Seconds before collectives give up (the launcher's own deadline).
    timeout_s: float


def launch(
    target: str,
    nprocs: int,
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Runs ``target(ctx, **kwargs)`` on ``nprocs`` fresh interpreters; returns each rank's result.

    ``target`` is ``"package.module:function"`` or ``"/path/to/file.py:function"``; kwargs and
    results must be picklable. Raises :class:`LaunchError` when a rank raises, exits without a
    result, is killed, or the whole run exceeds ``timeout_s``. Ranks are plain subprocesses (not
    multiprocessing children), so the caller's ``__main__`` is never re-imported.
    """
    with tempfile.TemporaryDirectory(prefix="dynamiccl-launch-") as workdir:
        ranks = Ranks(target, nprocs, kwargs, workdir, timeout_s, env)
        try:
            ranks.wait(timeout_s)
            return [_result(r, workdir) for r in range(nprocs)]
        finally:
            ranks.stop()


class Ranks:
    """Started rank processes: watch them, and stop them all, whatever state they are in."""

    def __init__(self, target: str, nprocs: int, kwargs: dict[str, Any] | None, workdir: str,
                 timeout_s: float, env: dict[str, str] | None = None) -> None:
        if nprocs < 1:
            raise ValueError(f"nprocs must be at least 1, got {nprocs}")
        _resolve(target)  # fail here, in the parent, on a misspelt target
        self.workdir = workdir
        rank_env = {**os.environ, **BASE_ENV, **(env or {})}
        init = f"file://{workdir}/store"
        self.procs: list[subprocess.Popen] = []
        try:
            for r in range(nprocs):
                ctx = RankContext(r, nprocs, init, timeout_s)
                Path(workdir, f"rank{r}.in").write_bytes(pickle.dumps((ctx, target, kwargs or {})))
                with open(Path(workdir, f"rank{r}.log"), "wb") as log:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "dynamiccl.profiler.launcher", workdir, str(r)],
                        env=rank_env, stdout=log, stderr=subprocess.STDOUT))
        except BaseException:
            self.stop()
            raise

    def check(self) -> bool:
        """True when every rank finished cleanly; raises LaunchError as soon as one failed."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            if any(c is None for c in codes):
                time.sleep(_GRACE_S)  # let peers that fail because of it report their own error
            codes = [p.poll() for p in self.procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            raise LaunchError(_failure_message(failed, codes, self.workdir))
        return all(c == 0 for c in codes)

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.check():
            if time.monotonic() > deadline:
                hung = [r for r, p in enumerate(self.procs) if p.poll() is None]
                raise LaunchError(
                    f"rank{'s' if len(hung) > 1 else ''} {', '.join(map(str, hung))} did not "
                    f"finish within {timeout_s:g} s (hung, or too slow for this size); stopped "
                    "all ranks. Raise --timeout or check the rank's node")
            time.sleep(_POLL_S)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2.0)


def _failure_message(failed: list[int], codes: list[int | None], workdir: str) -> str:
    """The first failing rank's own error first: later failures are usually its consequences."""
    parts = []
    for r in failed:
        err, log = Path(workdir, f"rank{r}.err"), Path(workdir, f"rank{r}.log")
        if err.is_file():
            lines = [ln for ln in err.read_text().strip().splitlines() if ln.strip()]
            parts.append(f"rank {r} failed: {lines[-1] if lines else 'unknown error'}")
        elif codes[r] is not None and codes[r] < 0:
            parts.append(f"rank {r} was killed by signal {signal.Signals(-codes[r]).name}")
        else:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
            parts.append(f"rank {r} exited with code {codes[r]} without a result"
                         + (f" ({tail[0].strip()})" if tail else ""))
    return "; ".join(parts) + "; stopped the other ranks"


def _result(rank: int, workdir: str) -> Any:
    path = Path(workdir, f"rank{rank}.pkl")
    if not path.is_file():
        raise LaunchError(f"rank {rank} exited cleanly but left no result")
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _resolve(target: str) -> Callable[..., Any]:
    module_name, sep, func = target.rpartition(":")
    if not sep or not module_name or not func:
        raise ValueError(f"target {target!r} must look like 'package.module:function' or "
                         "'path/to/file.py:function'")
    if module_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    try:
        return getattr(module, func)
    except AttributeError:
        raise ValueError(f"{module_name} has no function {func!r}") from None


def _rank_main(workdir: str, rank: int) -> None:
    ctx, target, kwargs = pickle.loads(Path(workdir, f"rank{rank}.in").read_bytes())
    try:
        result = _resolve(target)(ctx, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent as text
        Path(workdir, f"rank{rank}.err").write_text(
            traceback.format_exc() + f"\n{type(exc).__name__}: {exc}\n")
        sys.exit(1)
    tmp = Path(workdir, f"rank{rank}.pkl.tmp")
    tmp.write_bytes(pickle.dumps(result))
    tmp.rename(Path(workdir, f"rank{rank}.pkl"))


if __name__ == "__main__":
    _rank_main(sys.argv[1], int(sys.argv[2]))
