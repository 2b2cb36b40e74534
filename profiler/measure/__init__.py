"""Measuring: ranks on the local GPUs, collective timings, stragglers, NVML facts."""
