"""Ranks that stay up between measurements, for callers that measure one call at a time.

The live environment backend times a collective per step; starting ranks per step would cost
seconds. A :class:`RankSession` starts them once. Requests go to rank 0 over a private Unix socket;
rank 0 broadcasts each request, so every rank applies the same configuration, and sends back all
ranks' timings. Requests and timings travel over a gloo side group: the measured backend runs
nothing but the measured collectives (a communicator forced to ``NCCL_ALGO=Tree`` could not run a
broadcast of the request). A rank that dies or stalls ends the session with :class:`LaunchError` after the
timeout, like the one-shot launcher.

With NCCL, each distinct knob setting gets its own communicator (created once, then reused):
NCCL reads ``NCCL_ALGO``/``NCCL_PROTO`` when a communicator is created, and the channel count is set
per communicator through its ``min_ctas``/``max_ctas`` options. With ``emulate_hosts`` the NCCL
ranks are hosts of their own sharing the GPUs present (:mod:`dynamiccl.profiler.measure.emulation`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from dynamiccl.profiler.measure.launcher import LaunchError, RankContext, Ranks
from dynamiccl.profiler.measure.runner import CollectiveResult, CollectiveSpec, nccl_env, summarize
from dynamiccl.system.nccl import ALGO_ENV, PROTO_ENV

_NCCL_KNOB_VARS = (ALGO_ENV, PROTO_ENV)


class RankSession:
    """``nprocs`` local ranks on ``backend``, measuring on request until :meth:`close`; ``env`` is
    more environment for the ranks (NCCL's profiler plugin, say)."""

    def __init__(self, nprocs: int, backend: str = "gloo", timeout_s: float = 120.0,
                 emulate_hosts: bool = False, env: dict[str, str] | None = None) -> None:
        if emulate_hosts and backend != "nccl":
            raise ValueError("emulated hosts are NCCL ranks; use backend='nccl'")
        self.nprocs, self.backend, self.timeout_s = nprocs, backend, timeout_s
        self.emulate_hosts = emulate_hosts
        self._workdir = tempfile.mkdtemp(prefix="dynamiccl-session-")
        address = str(Path(self._workdir, "control.sock"))
        key = secrets.token_bytes(16)
        rank_env = {**(env or {}), **({"CUDA_VISIBLE_DEVICES": ""} if backend == "gloo" else {})}
        self._ranks: Ranks | None = Ranks(
            "dynamiccl.profiler.measure.session:serve", nprocs,
            {"backend": backend, "address": address, "authkey": key}, self._workdir, timeout_s,
            rank_env, emulate_hosts)
        self._conn: Connection | None = None
        try:
            self._conn = self._connect(address, key)
        except BaseException:
            self.close()
            raise

    def _connect(self, address: str, key: bytes) -> Connection:
        deadline = time.monotonic() + self.timeout_s
        while True:
            assert self._ranks is not None
            self._ranks.check()
            if os.path.exists(address):
                try:
                    return Client(address, family="AF_UNIX", authkey=key)
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            if time.monotonic() > deadline:
                raise LaunchError(f"the {self.nprocs} ranks did not start within "
                                  f"{self.timeout_s:g} s; stopped them")
            time.sleep(0.05)

    def measure(self, specs: list[CollectiveSpec]) -> list[CollectiveResult]:
        """Every spec measured by every rank, in order; raises LaunchError on a dead or stuck rank."""
        if self._conn is None or self._ranks is None:
            raise RuntimeError("the session is closed")
        for spec in specs:
            if spec.backend != self.backend:
                raise ValueError(f"this session runs {self.backend}, not {spec.backend}")
            if spec.straggler_rank is not None and not 0 <= spec.straggler_rank < self.nprocs:
                raise ValueError(f"straggler rank {spec.straggler_rank} is outside "
                                 f"0..{self.nprocs - 1}")
        self._conn.send(specs)
        deadline = time.monotonic() + self.timeout_s
        while not self._conn.poll(0.05):
            try:
                self._ranks.check()
            except LaunchError:
                self.close()
                raise
            if time.monotonic() > deadline:
                self.close()
                raise LaunchError(f"a measurement did not finish within {self.timeout_s:g} s "
                                  "(a rank hung); stopped all ranks")
        return [summarize(spec, times, emulated_hosts=self.emulate_hosts)
                for spec, times in zip(specs, self._conn.recv(), strict=True)]

    def close(self) -> None:
        """Stops the ranks (politely first) and removes the session's files; safe to repeat."""
        if self._conn is not None:
            try:
                self._conn.send(None)
                if self._ranks is not None:
                    self._ranks.wait(5.0)
            except (OSError, LaunchError):
                pass
            self._conn.close()
            self._conn = None
        if self._ranks is not None:
            self._ranks.stop()
            self._ranks = None
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> RankSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(ctx: RankContext, backend: str, address: str, authkey: bytes) -> None:
    """Rank side: rank 0 relays requests; everyone measures each broadcast request."""
    import torch.distributed as dist

    from dynamiccl.profiler.measure.runner import gather_times, join_group, measure_in_group

    device, ctrl = join_group(ctx, backend)
    conn = Listener(address, family="AF_UNIX", authkey=authkey).accept() if ctx.rank == 0 else None
    groups: dict[tuple, Any] = {}
    try:
        while True:
            box = [conn.recv() if conn is not None else None]
            dist.broadcast_object_list(box, src=0, group=ctrl)
            specs = box[0]
            if specs is None:
                return
            out = [gather_times(measure_in_group(s, device, _knob_group(s, groups), ctrl), ctrl)
                   for s in specs]
            if conn is not None:
                conn.send(out)
    finally:
        dist.destroy_process_group()


def _knob_group(spec: CollectiveSpec, groups: dict[tuple, Any]) -> Any:
    """The communicator for ``spec``'s NCCL knobs (None: the default group, e.g. on gloo)."""
    env = nccl_env(spec)
    if spec.backend != "nccl" or not env:
        return None
    key = tuple(sorted(env.items()))
    if key not in groups:
        import torch.distributed as dist

        for var in _NCCL_KNOB_VARS:
            os.environ.pop(var, None)
        os.environ.update({k: v for k, v in env.items() if k in _NCCL_KNOB_VARS})
        options = dist.ProcessGroupNCCL.Options()
        if spec.channels is not None:
            options.config.min_ctas = options.config.max_ctas = int(spec.channels)
        groups[key] = dist.new_group(backend="nccl", pg_options=options)
    return groups[key]
