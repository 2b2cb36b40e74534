"""Measure a real system and fit the simulator to it (installed as ``dynamiccl.profiler``).

* :mod:`~dynamiccl.profiler.nvml` / :mod:`~dynamiccl.profiler.discover` – NVML facts (live or
  recorded) → a topology YAML, unmeasured values marked;
* :mod:`~dynamiccl.profiler.launcher`, :mod:`~dynamiccl.profiler.runner`,
  :mod:`~dynamiccl.profiler.session` – local ranks that never hang the caller, nccl-tests style
  timing, persistent ranks for the live environment backend; :mod:`~dynamiccl.profiler.emulation`
  – more NCCL ranks than GPUs, each its own host, and the MPS check that makes that honest;
* :mod:`~dynamiccl.profiler.straggler_detection`, :mod:`~dynamiccl.profiler.c2c`,
  :mod:`~dynamiccl.profiler.hooks` – who is persistently late, compute vs communication, and a
  DDP comm hook that measures both inside a user's job;
* :mod:`~dynamiccl.profiler.records`, :mod:`~dynamiccl.profiler.nccl_tests` – measurement records
  and the nccl-tests output parser;
* :mod:`~dynamiccl.profiler.measurements` – ``load(path)`` for every format users already have
  (nccl-tests text and ``-J`` JSON, NVIDIA's tuner measurement CSV, runner records);
  :mod:`~dynamiccl.profiler.nccl_debug_log` – NCCL's printed tuning table and picks;
  :mod:`~dynamiccl.profiler.published` – published runs kept as fixtures, and their replay tables;
* :mod:`~dynamiccl.profiler.calibrate`, :mod:`~dynamiccl.profiler.fit_report`,
  :mod:`~dynamiccl.profiler.synthetic` – least-squares calibration, its report, and a known-truth
  system to check it on.

Nothing here is imported by the core; torch is imported only where ranks run.
"""
