"""Starts N local ranks of a function with torch's process launcher, and never waits forever.

Process management is :func:`torch.multiprocessing.start_processes` (what ``torch.multiprocessing.spawn``
uses): fresh interpreters, the first failure reported with the rank's own traceback, the other ranks
stopped at once. What this module adds is what that launcher leaves to its caller: a deadline for the
whole run (a rank that stalls without failing), each rank's return value, a rendezvous through a
``FileStore`` in a private temporary directory (nothing listens on a network port, so parallel test
runs cannot collide), and an environment in place before torch loads in the rank
(``OMP_NUM_THREADS=1``, NCCL knobs). With ``emulate_hosts`` each rank is its own host to NCCL and
ranks share the GPUs present (:mod:`dynamiccl.profiler.measure.emulation`; checked in the parent first).

Ranks are spawned, so a caller's ``__main__`` must guard its entry point with
``if __name__ == "__main__":`` (a rank re-imports it, as with any spawned process). Targets are named
as text (``"package.module:function"`` or ``"/path/to/file.py:function"``) and resolved inside the
rank, so functions defined in files that are not importable packages (test helpers) work too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch.multiprocessing as mp

from dynamiccl.profiler.measure import emulation

#: Environment every rank gets unless the caller overrides it: one thread per rank, because ranks
#: share the machine's cores and oversubscription would show up as fake stragglers.
BASE_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_POLL_S = 0.05
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
    #: Every rank is its own host to NCCL (its environment is set already), GPUs are shared.
    emulated_hosts: bool = False

    def gpu(self) -> int:
        """The GPU this rank drives: its own without emulation, rank % GPUs with emulated hosts."""
        gpus = emulation.visible_gpus()
        if not self.emulated_hosts and self.rank >= gpus:
            emulation.check_placement(self.world_size, gpus, emulate_hosts=False)
        return emulation.gpu_of(self.rank, gpus)


def launch(
    target: str,
    nprocs: int,
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = 120.0,
    env: Mapping[str, str | None] | None = None,
    emulate_hosts: bool = False,
) -> list[Any]:
    """Runs ``target(ctx, **kwargs)`` on ``nprocs`` fresh interpreters; returns each rank's result.
    ``env`` changes the ranks' environment from this process's (None unsets a variable).

    Raises :class:`LaunchError` when a rank raises, exits without a result, is killed, or the
    whole run exceeds ``timeout_s``; :class:`~dynamiccl.profiler.measure.emulation.EmulationError` before
    starting anything when ``emulate_hosts`` ranks cannot share the GPUs present.
    """
    with tempfile.TemporaryDirectory(prefix="dynamiccl-launch-") as workdir:
        ranks = Ranks(target, nprocs, kwargs, workdir, timeout_s, env, emulate_hosts)
        try:
            ranks.wait(timeout_s)
            return [_result(r, workdir) for r in range(nprocs)]
        finally:
            ranks.stop()


class Ranks:
    """Started rank processes: watch them, and stop them all, whatever state they are in."""

    def __init__(self, target: str, nprocs: int, kwargs: dict[str, Any] | None, workdir: str,
                 timeout_s: float, env: Mapping[str, str | None] | None = None,
                 emulate_hosts: bool = False) -> None:
        if nprocs < 1:
            raise ValueError(f"nprocs must be at least 1, got {nprocs}")
        resolve(target)  # fail here, in the parent, on a misspelt target
        if emulate_hosts:
            emulation.prepare(nprocs, emulation.visible_gpus(), emulate_hosts=True)
        self.workdir = workdir
        args = (nprocs, workdir, target, kwargs or {}, f"file://{workdir}/store", timeout_s,
                emulate_hosts)
        with _environment({**BASE_ENV, **(env or {})}):
            self._context = mp.start_processes(_rank_main, args=args, nprocs=nprocs, join=False,
                                               start_method="spawn")

    def check(self) -> bool:
        """True when every rank finished cleanly; raises LaunchError as soon as one failed."""
        try:
            return self._context.join(timeout=0, grace_period=_GRACE_S)
        except mp.ProcessRaisedException as exc:
            lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            raise LaunchError(f"rank {exc.error_index} failed: {lines[-1] if lines else 'unknown error'}"
                              "; stopped the other ranks") from exc
        except mp.ProcessExitedException as exc:
            why = (f"was killed by signal {exc.signal_name}" if exc.signal_name
                   else f"exited with code {exc.exit_code} without a result")
            raise LaunchError(f"rank {exc.error_index} {why}; stopped the other ranks") from exc

    def wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.check():
            if time.monotonic() > deadline:
                hung = [r for r, p in enumerate(self._context.processes) if p.is_alive()]
                raise LaunchError(
                    f"rank{'s' if len(hung) > 1 else ''} {', '.join(map(str, hung))} did not "
                    f"finish within {timeout_s:g} s (hung, or too slow for this size); stopped "
                    "all ranks. Raise --timeout or check the rank's node")
            time.sleep(_POLL_S)

    def stop(self) -> None:
        processes = self._context.processes
        for p in processes:
            if p.is_alive():
                p.terminate()
        for p in processes:
            p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)


def set_environment(changes: Mapping[str, str | None]) -> dict[str, str | None]:
    """``changes`` into ``os.environ`` (None unsets a variable); returns what they replaced, in
    the same form, so that setting that back restores the environment."""
    saved = {k: os.environ.get(k) for k in changes}
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return saved


@contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """``changes`` in ``os.environ`` while ranks are spawned (they copy it at start), then the
    caller's own environment back."""
    saved = set_environment(changes)
    try:
        yield
    finally:
        set_environment(saved)


def _result(rank: int, workdir: str) -> Any:
    path = Path(workdir, f"rank{rank}.pkl")
    if not path.is_file():
        raise LaunchError(f"rank {rank} exited cleanly but left no result")
    with open(path, "rb") as fh:
        return pickle.load(fh)


def resolve(target: str) -> Callable[..., Any]:
    """The function ``target`` names (``"package.module:function"`` or ``"file.py:function"``)."""
    module_name, sep, func = target.rpartition(":")
    if not sep or not module_name or not func:
        raise ValueError(f"target {target!r} must look like 'package.module:function' or "
                         "'path/to/file.py:function'")
    module = _load_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    try:
        return getattr(module, func)
    except AttributeError:
        raise ValueError(f"{module_name} has no function {func!r}") from None


def _load_file(path: str) -> ModuleType:
    """The module of a ``.py`` file, loaded as an import would: entered in ``sys.modules`` (under a
    name made from its absolute path, the same in the caller and in every rank, so that pickled
    objects of its classes travel) before its code runs, since ``dataclasses`` and ``pickle`` look
    a module up there. Loaded once per process."""
    where = Path(path).resolve()
    name = f"_dynamiccl_target_{where.stem}_{hashlib.sha1(str(where).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, where)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _rank_main(rank: int, nprocs: int, workdir: str, target: str, kwargs: dict[str, Any],
               init_method: str, timeout_s: float, emulate_hosts: bool = False) -> None:
    """Rank side: run the target; a raise reaches the parent through torch's error file."""
    if emulate_hosts:  # before the target creates any communicator: NCCL reads these at init
        os.environ.update(emulation.emulated_host_env(rank))
    ctx = RankContext(rank, nprocs, init_method, timeout_s, emulate_hosts)
    result = resolve(target)(ctx, **kwargs)
    tmp = Path(workdir, f"rank{rank}.pkl.tmp")
    tmp.write_bytes(pickle.dumps(result))
    tmp.rename(Path(workdir, f"rank{rank}.pkl"))
    # The result is on disk: leave without the interpreter's teardown, during which gloo's worker
    # threads may still release tensors that need the GIL of a dying interpreter (an intermittent
    # SIGABRT, "terminate called without an active exception", after a rank did all its work).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
