"""Measure a real system and fit the simulator to it (installed as ``dynamiccl.profiler``).

Three rooms; measuring and fitting both read and write the formats, never each other
(``tests/test_architecture.py``). Nothing here is imported by the core; torch is imported only where
ranks run.

* :mod:`dynamiccl.profiler.formats` – measurement records and every file users already have;
* :mod:`dynamiccl.profiler.measure` – ranks on the local GPUs, timings, stragglers, NVML facts;
* :mod:`dynamiccl.profiler.fit` – the simulator calibrated to measurements, and its report.
"""
