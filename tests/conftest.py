"""Suite-wide settings: no accidental network use, and GPU tests skipped cleanly without a GPU."""

from __future__ import annotations

import os

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
