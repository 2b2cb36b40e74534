"""Training: ``dynamiccl train experiment=…`` / ``python experiments/train.py …`` (a Hydra app).

One run folder holds everything a run produces: the resolved config (``config.yaml``), SB3's
progress log, ``checkpoints/last.zip`` (replaced every ``trainer.checkpoint_every`` steps), the final
``model.zip``, and the evaluation against the baselines (``eval/``). Starting the same command in
the same folder again (``run_dir=…`` or ``hydra.run.dir=…``) *resumes*: the last checkpoint is
loaded with its optimizer state (and replay buffer, for DQN) and training continues from the saved
step to ``trainer.total_timesteps``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from dynamiccl.agents.callbacks import CheckpointEvery, EvaluateEvery
from dynamiccl.agents.config_schema import validate
from dynamiccl.agents.deploy import export_and_score
from dynamiccl.agents.envs_factory import deployable, make_training_env
from dynamiccl.agents.sb3_agents import SB3Policy, build_model, load_checkpoint, save_checkpoint

Reporter = Callable[[dict[str, Any], Path | None], None]


def _console(msg: str) -> None:
    print(f"[dynamiccl train] {msg}", flush=True)


def write_resolved_config(cfg: DictConfig, run_dir: Path) -> Path:
    path = run_dir / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return path


def _sb3_logger(run_dir: Path, run_logger: Any, start: int) -> Any:
    """SB3's scalars to a CSV (a resumed run starts its own file: SB3 truncates the one it opens)
    and to the run logger."""
    from stable_baselines3.common.logger import CSVOutputFormat, Logger

    name = f"progress_from_{start}.csv" if start else "progress.csv"
    formats = [CSVOutputFormat(str(run_dir / name))]
    writer = run_logger.sb3_writer()
    if writer is not None:
        formats.append(writer)
    return Logger(str(run_dir), formats)


def _load_or_build(cfg: DictConfig, env: Any, ckpt: Path) -> tuple[Any, int]:
    """The model to train and the step it starts at (0 for a fresh model)."""
    if cfg.trainer.resume and ckpt.is_file():
        model, meta = load_checkpoint(ckpt, env=env)
        if meta.get("algo") != cfg.agent.algo:
            raise ValueError(f"{ckpt} holds a {meta.get('algo')} agent but agent.algo is "
                             f"{cfg.agent.algo}; pick the same agent or a new run_dir")
        return model, int(model.num_timesteps)
    hparams = OmegaConf.to_container(cfg.agent.hparams, resolve=True)
    model = build_model(cfg.agent.algo, env, seed=int(cfg.seed),
                        hparams={"policy": cfg.agent.policy, **hparams})  # type: ignore[dict-item]
    return model, 0


def trained_policy(model: Any, cfg: DictConfig) -> SB3Policy:
    return SB3Policy(model, str(cfg.agent.algo), deployable=deployable(cfg))


def evaluate_run(cfg: DictConfig, policy: SB3Policy, run_dir: Path, run_logger: Any,
                 step: int) -> tuple[dict[str, Any], list[Any]]:
    """The trained agent against the baselines on ``eval.suite``: files, plots, wandb; returns the
    agent's metrics and every policy's report."""
    from dynamiccl.agents.evaluate import evaluate_policies, save_reports
    from dynamiccl.agents.registry import load_policy
    from dynamiccl.envs.workloads import load_suite

    suite = load_suite(str(cfg.eval.suite))
    only_exportable = deployable(cfg)
    policies = [load_policy(n, deployable=only_exportable, seed=int(cfg.seed))
                for n in cfg.eval.baselines]
    reports = evaluate_policies([*policies, policy], suite, deployable=only_exportable)
    out = run_dir / "eval"
    save_reports(reports, out)
    mine = reports[-1].summary()
    metrics = {k: mine[k] for k in ("geomean_speedup", "oracle_share", "worst_speedup")}
    run_logger.log_metrics({f"eval/{k}": v for k, v in metrics.items() if v is not None}, step=step)
    run_logger.log_table("eval/summary", [r.summary() for r in reports])
    if cfg.eval.plots:
        from dynamiccl.agents.evaluation_plots import plot_reports

        run_logger.log_images({f"eval/{k}": p for k, p in plot_reports(reports, out).items()})
    return metrics, reports


def quick_share(cfg: DictConfig, model: Any) -> float:
    """Oracle share of the current model on ``eval.suite`` (for periodic evaluation)."""
    from dynamiccl.agents.evaluate import evaluate_policy
    from dynamiccl.envs.workloads import load_suite

    report = evaluate_policy(trained_policy(model, cfg), load_suite(str(cfg.eval.suite)),
                             deployable=deployable(cfg))
    return report.oracle_share


def train(cfg: DictConfig, run_dir: str | Path, *, report: Reporter | None = None,
          run_logger: Any = None) -> dict[str, Any]:
    """Trains (or resumes) in ``run_dir``, evaluates, and returns the trained agent's metrics.

    ``report(metrics, checkpoint_path)`` is called at every checkpoint and at the end (Ray Tune's
    hook); ``run_logger`` defaults to the one ``cfg.logger`` instantiates.
    """
    validate(cfg)
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_resolved_config(cfg, run_dir)
    own_logger = run_logger is None
    if own_logger:
        run_logger = hydra.utils.instantiate(cfg.logger)
        run_logger.start(run_dir, OmegaConf.to_container(cfg, resolve=True), name=run_dir.name)
    import torch

    torch.set_num_threads(int(cfg.trainer.torch_threads))
    env = make_training_env(cfg)
    ckpt_dir = run_dir / "checkpoints"
    model, start = _load_or_build(cfg, env, ckpt_dir / "last.zip")
    total = int(cfg.trainer.total_timesteps)
    state = {"started_at_step": start, "resumed": start > 0, "total_timesteps": total}
    (run_dir / "train_state.json").write_text(json.dumps(state, indent=2))
    _console(f"resuming at step {start} of {total} from {ckpt_dir / 'last.zip'}" if start
             else f"training {cfg.agent.algo} for {total} steps in {run_dir}")
    model.set_logger(_sb3_logger(run_dir, run_logger, start))

    def on_save(path: Path, step: int) -> None:
        if report is not None:
            report({"step": step}, path.parent)

    saver = CheckpointEvery(int(cfg.trainer.checkpoint_every), ckpt_dir, str(cfg.agent.algo),
                            on_save=on_save)
    callbacks: list[Any] = [saver]
    if int(cfg.trainer.eval_every) > 0:
        def periodic(step: int) -> None:
            share = quick_share(cfg, model)
            run_logger.log_metrics({"eval/oracle_share": share}, step=step)
        callbacks.append(EvaluateEvery(int(cfg.trainer.eval_every), periodic))
    began = time.perf_counter()
    if total > start:
        model.learn(total - start, callback=callbacks, reset_num_timesteps=start == 0,
                    progress_bar=bool(cfg.trainer.progress_bar))
    seconds = time.perf_counter() - began
    saver.save_now(model)
    save_checkpoint(model, run_dir / "model.zip", str(cfg.agent.algo))
    env.close()
    metrics, reports = evaluate_run(cfg, trained_policy(model, cfg), run_dir, run_logger,
                                    int(model.num_timesteps))
    reports += export_and_score(cfg, trained_policy(model, cfg), run_dir)
    metrics.update(step=int(model.num_timesteps), train_seconds=seconds)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if report is not None:
        report(metrics, ckpt_dir)
    if own_logger:
        run_logger.finish()
        from dynamiccl.agents.evaluate import print_table

        print_table(reports, title=f"{cfg.eval.suite} suite: {reports[0].scenarios} calls "
                                   f"(results in {run_dir / 'eval'})")
    return metrics


@hydra.main(version_base="1.3", config_path="pkg://dynamiccl.configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns the oracle share so Hydra multirun sweeps can use it."""
    from hydra.core.hydra_config import HydraConfig

    with user_errors_exit("train"):
        metrics = train(cfg, HydraConfig.get().runtime.output_dir)
    return metrics.get("oracle_share")


@contextmanager
def user_errors_exit(command: str) -> Iterator[None]:
    """Inside a Hydra app, a bad config or input ends the run with one line and exit code 2
    (Hydra would otherwise print a traceback)."""
    try:
        yield
    except (ValueError, FileNotFoundError) as exc:
        print(f"dynamiccl {command}: error: {exc}", file=sys.stderr)
        sys.exit(2)

