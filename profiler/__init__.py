"""Measure a real system and fit the simulator to it (installed as ``dynamiccl.profiler``).

* :mod:`~dynamiccl.profiler.measure.nvml` / :mod:`~dynamiccl.profiler.measure.discover` – NVML facts (live or
  recorded) → a topology YAML, unmeasured values marked;
* :mod:`~dynamiccl.profiler.measure.launcher`, :mod:`~dynamiccl.profiler.measure.runner`,
  :mod:`~dynamiccl.profiler.measure.session` – local ranks that never hang the caller, nccl-tests style
  timing, persistent ranks for the live environment backend; :mod:`~dynamiccl.profiler.measure.emulation`
  – more NCCL ranks than GPUs, each its own host, and the MPS check that makes that honest;
* :mod:`~dynamiccl.profiler.measure.straggler_detection`, :mod:`~dynamiccl.profiler.measure.c2c`,
  :mod:`~dynamiccl.profiler.measure.hooks` – who is persistently late, compute vs communication, and a
  DDP comm hook that measures both inside a user's job;
* :mod:`~dynamiccl.profiler.formats.records`, :mod:`~dynamiccl.profiler.formats.nccl_tests` –
  measurement records and the nccl-tests output parser;
* :mod:`~dynamiccl.profiler.formats.measurements` – ``load(path)`` for every format users already have
  (nccl-tests text and ``-J`` JSON, NVIDIA's tuner measurement CSV, runner records);
  :mod:`~dynamiccl.profiler.formats.nccl_debug_log` – NCCL's printed tuning table and picks;
  :mod:`~dynamiccl.profiler.formats.published` – published runs kept as fixtures, and their replay tables;
* :mod:`~dynamiccl.profiler.fit.calibrate`, :mod:`~dynamiccl.profiler.fit.fit_report`,
  :mod:`~dynamiccl.profiler.fit.synthetic` – least-squares calibration, its report, and a known-truth
  system to check it on.

Nothing here is imported by the core; torch is imported only where ranks run.
"""
