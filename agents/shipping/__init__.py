"""Shipping: from policies and measurements to a policy file a job loads, and what it is worth.

Imports policies, never training.

* :mod:`.evaluate` – scoring policies on a suite against NCCL's default and the oracle;
  :mod:`.evaluation_plots` – its figures; :mod:`.progress` – progress bars for long work;
* :mod:`.export` – a policy's answers over the decision grid as policy-file rules, through
  :mod:`.gate`, the safety gate (a rule overrides NCCL only where the evidence says it wins);
  :mod:`.deploy` – after training, the shipped file written and scored;
* :mod:`.tune` – ``dynamiccl tune``: a system's measurements to a gated policy, with
  :mod:`.tune_measurements` (times by launch and their noise), :mod:`.tune_plan` (the measurements
  that could change a decision), :mod:`.tune_workload` (a job's time per size, which weighs both)
  and :mod:`.prior`, the learned prior's inference (``learned_prior.npz`` beside it is the shipped
  one).
"""
