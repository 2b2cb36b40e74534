"""Policies: what chooses NCCL's algorithm, protocol and channels for a call.

Imports nothing of shipping or training, so a policy can be loaded, scored and run in a job
without the pipeline that made it.

* :mod:`.policy` – the one ``Policy`` interface (``act(observation) -> action``) and its helpers;
* :mod:`.baselines` – NCCL's default, the oracle, the static best, random;
* :mod:`.online` – online black-box tuners (AutoCCL-style coordinate descent, UCB);
  :mod:`.adaptive` – online tuners over the model's candidates, learned and hand-written;
  :mod:`.runtime_tuner` – them behind the runtime's tuner protocol;
* :mod:`.sb3_agents` – PPO, DQN and MaskablePPO: construction, checkpoints, a policy view;
  :mod:`.full_info` – the full-information learner and its trained policy;
* :mod:`.deployed` – shipped policy files as policies;
* :mod:`.registry` – ``load_policy(name_or_path)``: a built-in by name, a checkpoint or a file.
"""
