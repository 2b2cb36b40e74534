"""GPU models as logs name them (``NVIDIA H100 80GB HBM3``), and the architecture each one is.

A topology says which GPUs it describes by architecture (``gpu.arch: sm90``); a measurement log says
it by the product name nvidia-smi and nccl-tests print. Matching the two catches logs given with the
wrong system's topology (an A100's logs fitted as an H100's). Names are matched by the product's
model number, from NVIDIA's CUDA GPU compute-capability list (developer.nvidia.com/cuda-gpus).
"""

from __future__ import annotations

import re

#: Model-number patterns -> compute capability x 10 (as ``topology.ARCHS`` holds them). Checked in
#: order: the first pattern found in the name decides.
_FAMILIES: tuple[tuple[str, int], ...] = (
    (r"\bG?B[123]00\b", 100),                       # B100, B200, GB200, B300, GB300
    (r"\bRTX (PRO )?50\d0\b|\bRTX PRO \d+ BLACKWELL\b", 120),
    (r"\bG?H(100|200|800|20)\b", 90),               # H100, H200, H800, H20, GH200
    (r"\bL40S?\b|\bL4\b|\bL20\b|\bRTX 40\d0\b|\bRTX \d+ ADA\b", 89),
    (r"\bA(10|10G|16|40|2)\b|\bRTX 30\d0\b|\bRTX A\d+\b", 86),
    (r"\bA(100|800|30)\b", 80),
    (r"\bT4\b|\bRTX 20\d0\b|\bQUADRO RTX\b", 75),
    (r"\bV100\b", 70),
)


def compute_capability(gpu_name: str) -> int | None:
    """The compute capability (x 10: 90 for an H100) of a GPU named as a log names it; None for a
    name this table does not know."""
    name = gpu_name.upper().replace("-", " ")
    for pattern, capability in _FAMILIES:
        if re.search(pattern, name):
            return capability
    return None


def same_architecture(gpu_name: str, arch_capability: int, newest_known: int) -> bool:
    """Whether a GPU named ``gpu_name`` is of a topology's architecture (``arch_capability``, x 10).

    A GPU newer than any architecture the topology schema knows (``newest_known``) is described by
    the newest one, as the schema's own files do; a name this table does not know is not refused.
    """
    capability = compute_capability(gpu_name)
    if capability is None:
        return True
    if capability > newest_known:
        return arch_capability == newest_known
    return capability == arch_capability
