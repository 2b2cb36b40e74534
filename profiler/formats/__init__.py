"""Formats: measurement records, and the files users already have read into them.

Imports only the core.

* :mod:`.records` – one measured collective, as the runner and every parser write it (JSONL);
* :mod:`.nccl_tests`, :mod:`.nccl_tests_json` – nccl-tests text output and its ``-J`` JSON;
  :mod:`.tuner_measurements_csv` – NVIDIA's example tuner's measurement CSV;
  :mod:`.nccl_topo_timings` – NVIDIA's cost-model test timings (``time.txt`` per configuration);
  :mod:`.nccl_debug_log` – NCCL's printed tuning table and picks;
* :mod:`.measurements` – ``load(path)`` for any of them; :mod:`.measurement_paths` – the files and
  folders a user names (each file once); :mod:`.published` – published runs kept as fixtures, and
  replay tables;
* :mod:`.job_mix` – a job's collective mix (``profile job``): records with the job's call counts;
* :mod:`.system_fit` – whether records fit the topology they are to tune (both ``tune`` and
  ``calibrate`` check before fitting).
"""
