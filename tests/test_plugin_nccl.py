"""Against the real NCCL: the PyPI libnccl.so.2 must find an ABI version our plugin exports, and on a
GPU machine a real communicator must load and use the plugin."""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import subprocess
import sys
import textwrap

import pytest

from dynamiccl import plugin
from dynamiccl import policy_file as pf

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


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


_WORKER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=rank,
                            world_size=world)
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    assert x[0].item() == world
    dist.destroy_process_group()
""")


@pytest.mark.gpu
@needs_nccl
def test_real_communicator_uses_the_plugin(tmp_path):
    gpus = _gpu_count()
    if gpus == 0:
        pytest.skip("needs an NVIDIA GPU and driver")
    from dynamiccl.agents.export import export_policy
    from dynamiccl.agents.registry import load_policy
    from dynamiccl.topology import load_topology

    world = min(gpus, 2)
    topo = load_topology("dgx_h100", nodes=1, gpus_per_node=world)
    result = export_policy(load_policy("oracle", topology=topo, deployable=True), topo,
                           gate=None)  # ungated: the plugin must force what the file says
    policy_path = pf.write(result.policy_file, tmp_path / "gpu.dccl")
    env = dict(os.environ, NCCL_TUNER_PLUGIN=str(plugin.library_path()), NCCL_DEBUG="INFO",
               DYNAMICCL_POLICY=str(policy_path), DYNAMICCL_LOG_DECISIONS="1")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs[0][-4000:]
    assert "TUNER/Plugin: Using DynamICCL" in logs[0], logs[0][-4000:]
    assert "DynamICCL: policy oracle" in logs[0]
