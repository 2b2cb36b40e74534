"""Against the real NCCL: the PyPI libnccl.so.2 must find an ABI version our plugin exports, and on a
GPU machine (one GPU is enough: emulated hosts) NCCL must run what the plugin's policy decides."""

from __future__ import annotations

import ctypes
import mmap
import re
from pathlib import Path

import pytest

from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.knobs import Algorithm, Collective, Protocol

NCCL = plugin.find_nccl_library()
needs_nccl = pytest.mark.skipif(NCCL is None, reason="no nvidia-nccl wheel installed")


@pytest.fixture(scope="module")
def nccl_version() -> int:
    lib = ctypes.CDLL(str(NCCL))  # loads without a GPU or driver
    code = ctypes.c_int(0)
    assert lib.ncclGetVersion(ctypes.byref(code)) == 0
    return code.value


@needs_nccl
def test_installed_nccl_finds_an_abi_version_we_export(nccl_version, tmp_path_factory):
    abi = plugin.first_abi_loaded(nccl_version)
    assert abi is not None, f"NCCL {nccl_version} predates tuner ABI v2"
    library = plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds")
    assert f"ncclTunerPlugin_v{abi}" in plugin.exported_symbols(library)


@needs_nccl
def test_our_version_table_matches_the_nccl_binary(nccl_version):
    """The loader looks symbols up by name: the newest name in the binary is the one we predict,
    and no newer ABI exists that we do not export."""
    with open(NCCL, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        named = {int(v) for v in re.findall(rb"ncclTunerPlugin_v(\d+)\x00", data)}
    assert max(named) == plugin.first_abi_loaded(nccl_version)
    assert max(named) <= max(plugin.ABI_VERSIONS)


WORKERS = str(Path(__file__).parent / "runtime_workers.py")
#: The sizes the test all-reduces (nccl-tests sizes); the policy overrides NCCL at OVERRIDDEN only.
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
OVERRIDDEN = 256 << 10
#: What the policy may force there, first one NCCL did not pick itself and can run.
ALTERNATIVES = [(Algorithm.TREE, Protocol.SIMPLE), (Algorithm.RING, Protocol.LL),
                (Algorithm.RING, Protocol.SIMPLE), (Algorithm.TREE, Protocol.LL)]
HOSTS = 2


def _run_logged(tmp_path: Path, name: str, env: dict[str, str]) -> list[str]:
    """All-reduces SIZES on HOSTS emulated hosts with NCCL's INIT,TUNING log per rank; returns the
    ranks' logs (each result checked to be the exact sum)."""
    from dynamiccl.profiler.measure.launcher import launch

    folder = tmp_path / name
    folder.mkdir()
    exact = launch(f"{WORKERS}:all_reduce_sizes", HOSTS, {"sizes": SIZES, "log_dir": str(folder)},
                   timeout_s=300, emulate_hosts=True,
                   env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING", **env})
    assert all(exact), f"{name}: a rank's all-reduce result was not the sum"
    return [(folder / f"rank{r}.log").read_text(errors="replace") for r in range(HOSTS)]


def _picks(log: str) -> dict[int, tuple[Algorithm, Protocol]]:
    from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log

    return {p.nbytes: (p.algorithm, p.protocol) for p in parse_debug_log(log).distinct_picks()
            if p.collective == Collective.ALLREDUCE}


@pytest.mark.gpu
@pytest.mark.multiproc
@needs_nccl
def test_on_emulated_hosts_nccl_runs_the_policys_choice_where_it_overrides_and_its_own_elsewhere(
        tmp_path, mps):
    """Two emulated hosts on one GPU (a one-rank communicator never asks the tuner). NCCL's own
    TUNING log (rank 0 prints every call's pick) shows what ran: first without the plugin, then
    with a policy that overrides NCCL at OVERRIDDEN only; every rank logs the policy's sha."""
    from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log

    baseline = _run_logged(tmp_path, "nccl", {})
    own = _picks(baseline[0])
    assert set(SIZES) <= set(own), f"NCCL logged no pick for {sorted(set(SIZES) - set(own))}"
    table = parse_debug_log(baseline[0]).tables[0]  # rank 0's table: what NCCL can run here
    usable = [(a, p) for a, p in ALTERNATIVES
              if table.bandwidth_GBps[Collective.ALLREDUCE, a, p] > 0 and (a, p) != own[OVERRIDDEN]]
    assert usable, f"NCCL can run none of {ALTERNATIVES} besides its own pick at {OVERRIDDEN} B"
    forced = usable[0]
    rule = pf.Rule(Collective.ALLREDUCE, OVERRIDDEN, 2 * OVERRIDDEN - 1,
                   decision=pf.Decision(*forced))
    header = pf.Header("gpu-test", "2026-01-01T00:00:00Z", "emulated", "0123456789abcdef",
                       pf.DEFAULT_NCCL_RANGE, "cafe")
    policy = pf.write(pf.PolicyFile(header, (pf.Slice(rules=(rule,)),)), tmp_path / "gpu.dccl")
    tuned = _run_logged(tmp_path, "tuned", {"NCCL_TUNER_PLUGIN": str(plugin.library_path()),
                                            "DYNAMICCL_POLICY": str(policy)})
    picks = _picks(tuned[0])
    assert picks[OVERRIDDEN] == forced, tuned[0][-4000:]
    assert {n: picks[n] for n in SIZES if n != OVERRIDDEN} == \
        {n: own[n] for n in SIZES if n != OVERRIDDEN}  # NCCL's own pick everywhere else
    sha = pf.file_hash(policy)
    for rank, log in enumerate(tuned):
        assert "TUNER/Plugin: Using DynamICCL" in log, f"rank {rank} did not load the plugin"
        assert f"DynamICCL: policy gpu-test (sha256 {sha})" in log, f"rank {rank}: {log[-3000:]}"
