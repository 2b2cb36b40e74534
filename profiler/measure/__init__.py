"""Measuring: ranks on the local GPUs, collective timings, stragglers, NVML facts.

Imports the core and :mod:`dynamiccl.profiler.formats` (what it measures is written as records).

* :mod:`.launcher`, :mod:`.runner`, :mod:`.session` – local ranks that never hang the caller,
  nccl-tests style timing, persistent ranks for the live environment backend;
  :mod:`.interleave` – several choices side by side: pinned call by call through the tuner plugin
  in one launch, rounds in alternating order over several launches;
  :mod:`.emulation` – more NCCL ranks than GPUs, each its own host, and the MPS check that makes
  that honest;
* :mod:`.straggler_detection`, :mod:`.c2c`, :mod:`.hooks` – who is persistently late, compute vs
  communication, and a DDP comm hook that measures both inside a user's job;
* :mod:`.nvml` / :mod:`.discover` – NVML facts (live or recorded) → a topology YAML, unmeasured
  values marked;
* :mod:`.profile_reader` – NCCL's own measurements from the plugin's profiler rings (per-call GPU
  times with NCCL's choice, joined across ranks); :mod:`.job_profile` – a user's job run with the
  profiler loaded, its collective mix as it runs.
"""
