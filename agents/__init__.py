"""Tuning policies and the experiment pipeline (installed as ``dynamiccl.agents``).

* :mod:`~dynamiccl.agents.policies.policy` – the one ``Policy`` interface (``act(observation) -> action``).
* :mod:`~dynamiccl.agents.policies.baselines` – NCCL's default, the oracle, the static best, random.
* :mod:`~dynamiccl.agents.policies.online` – online black-box tuners (AutoCCL-style coordinate
  descent, UCB).
* :mod:`~dynamiccl.agents.policies.sb3_agents` – PPO, DQN, MaskablePPO and their checkpoints.
* :mod:`~dynamiccl.agents.policies.registry` – ``load_policy(name_or_path)``.
* :mod:`~dynamiccl.agents.shipping.evaluate` – scoring on a suite; :mod:`.evaluation_plots` – its figures.
* :mod:`~dynamiccl.agents.training.train` / :mod:`~dynamiccl.agents.training.sweep` – the Hydra apps
  (training with exact resume, Ray Tune sweeps), built on :mod:`.config_checks` (what the configs' schema,
  :mod:`dynamiccl.configs.schema`, cannot express),
  :mod:`.run_folder` (lock, recorded settings), :mod:`.callbacks` (rollout-aligned checkpoints and
  evaluations, Ctrl-C), :mod:`.resume_state` (environment streams and generators in a checkpoint),
  :mod:`.training_plots`; :mod:`~dynamiccl.agents.training.logging` – wandb (offline by default).
"""
