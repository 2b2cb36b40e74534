"""Suite-wide settings: no accidental network use, GPU tests skipped cleanly without a GPU, and no
test leaving files in the checkout; NCCL's model of one and of eight DGX H100 nodes (``h1``, ``h8``),
on which the NCCL model's tests check their hand-derived values; and ``opened``, how often a test
opens each file."""

from __future__ import annotations

import builtins
import io
import os
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def _gpu_present() -> bool:
    """True when an NVIDIA driver answers; asked through NVML so torch need not be imported."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (none found through NVML)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def mps(tmp_path_factory: pytest.TempPathFactory):
    """A CUDA MPS control daemon for tests that put several NCCL ranks on one GPU (emulated hosts):
    the user's when one answers, else one started here with private pipe and log folders (the
    ranks inherit CUDA_MPS_PIPE_DIRECTORY) and stopped at the end. Skips, naming why, where none
    can run. Without MPS the ranks' kernels time-slice the GPU and every collective takes whole
    time slices, so the tests would time the scheduler."""
    import shutil
    import subprocess
    import time

    from dynamiccl.profiler.measure import emulation

    if emulation.mps_problem() is None:
        yield None
        return
    if shutil.which(emulation.MPS_CONTROL) is None:
        pytest.skip(f"emulated hosts on one GPU need the CUDA MPS daemon; {emulation.MPS_CONTROL} "
                    "is not on PATH")
    folder = tmp_path_factory.mktemp("mps")
    dirs = {emulation.MPS_PIPE_ENV: folder / "pipe", "CUDA_MPS_LOG_DIRECTORY": folder / "log"}
    saved = {k: os.environ.get(k) for k in dirs}
    for key, path in dirs.items():
        path.mkdir()
        os.environ[key] = str(path)
    started = subprocess.run([emulation.MPS_CONTROL, "-d"], capture_output=True, text=True, timeout=60)
    problem = f"{emulation.MPS_CONTROL} -d failed: {(started.stdout + started.stderr).strip()[:200]}"
    for _ in range(20 if started.returncode == 0 else 0):  # the daemon opens its pipe shortly after
        problem = emulation.mps_problem()
        if problem is None:
            break
        time.sleep(0.5)
    try:
        if problem is not None:
            pytest.skip(f"emulated hosts on one GPU need the CUDA MPS daemon, which could not be "
                        f"started here: {problem}")
        yield folder
    finally:
        if started.returncode == 0:
            subprocess.run([emulation.MPS_CONTROL], input="quit\n", capture_output=True, text=True,
                           timeout=60)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: The checkout's root, and what may appear there while tests run: the build outputs and caches
#: that .gitignore names.
CHECKOUT = Path(__file__).resolve().parent.parent
MAY_APPEAR_IN_CHECKOUT = {".venv", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache",
                          "outputs", "multirun", "wandb", "ray_results", ".whl", ".gl"}


@pytest.fixture(autouse=True)
def leaves_the_checkout_alone():
    """A test writes under its tmp_path, never into the checkout: a command run from the root (a
    printed ``tune --plan`` writes ./logs) would leave files that the next commit picks up."""
    before = set(os.listdir(CHECKOUT))
    yield
    left = {name for name in set(os.listdir(CHECKOUT)) - before - MAY_APPEAR_IN_CHECKOUT
            if not name.endswith(".egg-info")}
    assert not left, f"the test left {sorted(left)} in the checkout {CHECKOUT}; write under tmp_path"


@pytest.fixture
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs the test in its tmp_path, for commands that write beside where they are run."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[Path, str]]:
    """How many times the test opens each file, by (resolved path, mode as given: ``"r"`` to read
    text, ``"rb"`` bytes): the real ``open`` is called through, only counted, so a command run as it
    is shows how often it reads each of its inputs."""
    real = builtins.open
    counts: Counter[tuple[Path, str]] = Counter()

    def counted(file, mode="r", *args, **kwargs):
        if isinstance(file, str | os.PathLike):
            counts[Path(file).resolve(), mode] += 1
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counted)
    monkeypatch.setattr(io, "open", counted)
    return counts


@pytest.fixture(scope="module")
def h1():
    """NCCL's model (``dynamiccl.nccl_model``) of one DGX H100 node."""
    from dynamiccl.nccl_model import NcclModel
    from dynamiccl.system.topology import load_topology

    return NcclModel(load_topology("dgx_h100"))


@pytest.fixture(scope="module")
def h8():
    """NCCL's model of eight DGX H100 nodes."""
    from dynamiccl.nccl_model import NcclModel
    from dynamiccl.system.topology import load_topology

    return NcclModel(load_topology("dgx_h100", nodes=8))
