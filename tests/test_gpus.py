"""GPU models as logs name them, matched to a topology's architecture."""

from __future__ import annotations

import pytest

from dynamiccl.gpus import compute_capability, same_architecture
from dynamiccl.system.topology import ARCHS


@pytest.mark.parametrize("name, capability", [
    ("NVIDIA H100 80GB HBM3", 90), ("NVIDIA GH200 120GB", 90), ("NVIDIA H200", 90),
    ("NVIDIA A100-SXM4-40GB", 80), ("A100-SXM4-40GB", 80), ("NVIDIA A10G", 86),
    ("NVIDIA L40S", 89), ("Tesla V100-SXM2-32GB", 70), ("Tesla T4", 75), ("NVIDIA B200", 100),
    ("NVIDIA GeForce RTX 5090", 120), ("NVIDIA RTX 6000 Ada Generation", 89),
    ("Some Future Accelerator", None),
])
def test_a_logs_gpu_name_gives_its_compute_capability(name, capability):
    assert compute_capability(name) == capability


def test_an_a100_is_not_an_h100_and_a_gpu_newer_than_the_schema_takes_its_newest_arch():
    newest = max(ARCHS.values())
    assert not same_architecture("NVIDIA A100-SXM4-80GB", ARCHS["sm90"], newest)
    assert same_architecture("NVIDIA H100 80GB HBM3", ARCHS["sm90"], newest)
    assert same_architecture("NVIDIA GeForce RTX 5090", ARCHS["sm100"], newest)
    assert not same_architecture("NVIDIA GeForce RTX 5090", ARCHS["sm90"], newest)
    assert same_architecture("Some Future Accelerator", ARCHS["sm70"], newest)  # unknown: not refused
