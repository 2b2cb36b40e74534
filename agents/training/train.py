"""Training: ``dynamiccl train experiment=…`` / ``python experiments/train.py …`` (a Hydra app).

One run folder holds one run: the resolved config (``config.yaml``), SB3's progress logs,
``checkpoints/last.zip`` (replaced at the first rollout boundary past every
``trainer.checkpoint_every`` steps), the final ``model.zip``, the periodic evaluations, the
training curve and the evaluation against the baselines (``eval/``). Starting the same command in
the same folder again (``hydra.run.dir=…``) *resumes* from the last checkpoint: weights, optimizer,
replay buffer, the environments' streams and the generators, so the resumed run ends exactly where
the uninterrupted one would have. Ctrl-C saves at the next rollout boundary and stops.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from dynamiccl.agents.policies.sb3_agents import (
    SB3Policy,
    build_model,
    checkpoint_meta,
    load_checkpoint,
    save_checkpoint,
)
from dynamiccl.agents.shipping.deploy import export_and_score, what_next
from dynamiccl.agents.training.callbacks import (
    AtRolloutBoundary,
    Evaluate,
    Interrupt,
    SaveAndStopOnInterrupt,
    SaveCheckpoint,
    parameters_digest,
    record_checkpoint,
    trained_seconds,
)
from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.envs_factory import deployable, make_training_env
from dynamiccl.agents.training.evidence_agent import is_evidence_tuner
from dynamiccl.agents.training.full_info_agent import is_full_info
from dynamiccl.agents.training.prior_agent import is_learned_prior
from dynamiccl.agents.training.resume_state import restore
from dynamiccl.agents.training.round_agent import RoundAgent
from dynamiccl.agents.training.round_checkpoints import learned_state
from dynamiccl.agents.training.run_folder import check_run_folder, locked, record_config
from dynamiccl.config_loader import ConfigError
from dynamiccl.files import write_text_atomic

#: ``report(metrics, checkpoint_folder)``: called after every evaluation (Ray Tune's hook).
Reporter = Callable[[dict[str, Any], Path], None]
EVAL_METRICS = ("geomean_speedup", "oracle_share", "worst_speedup")


class Interrupted(Exception):
    """Training stopped by Ctrl-C; the message says what was saved."""


def _console(msg: str) -> None:
    print(f"[dynamiccl train] {msg}", flush=True)


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


def _checked_checkpoint(cfg: DictConfig, ckpt_dir: Path) -> dict[str, Any] | None:
    """The sidecar of the run folder's checkpoint (an SB3 agent's ``last.zip``, the full-information
    learner's ``last.pt``), refused when it holds another agent."""
    ckpt = next((p for p in (ckpt_dir / "last.zip", ckpt_dir / "last.pt") if p.is_file()), None)
    if ckpt is None:
        return None
    meta = checkpoint_meta(ckpt)
    if meta.get("algo") != cfg.agent.name:
        raise ConfigCheckError(f"{ckpt} holds a {meta.get('algo')} agent but agent is {cfg.agent.name}; "
                               f"choose agent={meta.get('algo')} or a new run folder (hydra.run.dir=PATH)")
    return meta


def _load_or_build(cfg: DictConfig, env: Any, ckpt: Path) -> tuple[Any, int, bool]:
    """The model to train, the step it starts at, and whether the environment stream was restored."""
    if not ckpt.is_file():
        return build_model(cfg.agent, env, seed=int(cfg.seed)), 0, False
    model, meta = load_checkpoint(ckpt, env=env)
    state = meta.get("resume")
    if state is not None and len(state["envs"]) == env.num_envs:
        restore(model, state)
        return model, int(model.num_timesteps), True
    return model, int(model.num_timesteps), False


def trained_policy(model: Any, cfg: DictConfig) -> SB3Policy:
    return SB3Policy(model, str(cfg.agent.name), deployable=deployable(cfg))


def evaluate_run(cfg: DictConfig, policy: Any, run_dir: Path, run_logger: Any,
                 step: int) -> tuple[dict[str, Any], list[Any]]:
    """The trained agent against the baselines on ``eval.suite``: files, plots, wandb; returns the
    agent's metrics and every policy's report."""
    from dynamiccl.agents.policies.registry import load_policy
    from dynamiccl.agents.shipping.evaluate import evaluate_policies, save_reports
    from dynamiccl.envs.workloads import load_suite

    suite = load_suite(str(cfg.eval.suite))
    only_exportable = deployable(cfg)
    policies = [load_policy(n, deployable=only_exportable, seed=int(cfg.seed))
                for n in cfg.eval.baselines]
    reports = evaluate_policies([*policies, policy], suite, deployable=only_exportable,
                                progress=True)
    out = run_dir / "eval"
    save_reports(reports, out)
    mine = reports[-1].summary()
    metrics = {k: mine[k] for k in EVAL_METRICS}
    run_logger.log_metrics({f"eval/{k}": v for k, v in metrics.items() if v is not None}, step=step)
    run_logger.log_table("eval/summary", [r.summary() for r in reports])
    if cfg.eval.plots:
        from dynamiccl.agents.shipping.evaluation_plots import plot_reports

        figures = plot_reports(reports, out, suite=str(cfg.eval.suite), deployable=only_exportable)
        run_logger.log_images({f"eval/{k}": p for k, p in figures.items()})
    return metrics, reports


def quick_metrics(cfg: DictConfig, policy: Any) -> dict[str, Any]:
    """The current policy's metrics on ``eval.suite`` (periodic evaluation, no baselines)."""
    from dynamiccl.agents.shipping.evaluate import evaluate_policy
    from dynamiccl.envs.workloads import load_suite

    report = evaluate_policy(policy, load_suite(str(cfg.eval.suite)), deployable=deployable(cfg))
    summary = report.summary()
    return {k: summary[k] for k in EVAL_METRICS}


class _Evaluations:
    """``evaluations.jsonl``: one line per periodic evaluation; a resumed run first drops what the
    interrupted segment evaluated past its last checkpoint (a line a kill cut short included), so
    the file describes one run."""

    def __init__(self, path: Path, start: int) -> None:
        self.path = path
        if path.is_file():
            kept = [line for line in path.read_text().splitlines()
                    if (step := _evaluation_step(line)) is not None and step <= start]
            write_text_atomic(path, "".join(f"{line}\n" for line in kept))

    def append(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")


def _evaluation_step(line: str) -> int | None:
    """The step of an ``evaluations.jsonl`` line; None for a line that is not one (cut short by a
    kill in the middle of writing it)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) else None


def _callbacks(cfg: DictConfig, model: Any, run_dir: Path, run_logger: Any, start: int,
               report: Reporter | None, interrupt: Interrupt,
               clock: Callable[[], float]) -> tuple[list[Any], SaveCheckpoint]:
    ckpt_dir = run_dir / "checkpoints"
    saver = SaveCheckpoint(ckpt_dir, str(cfg.agent.name), start, clock)
    callbacks: list[Any] = [SaveAndStopOnInterrupt(interrupt, saver), *run_logger.sb3_callbacks()]
    if int(cfg.trainer.checkpoint_every) > 0:
        callbacks.append(AtRolloutBoundary(int(cfg.trainer.checkpoint_every), saver))
    if int(cfg.trainer.eval_every) > 0:
        evaluations = _Evaluations(run_dir / "evaluations.jsonl", start)

        def periodic(step: int) -> None:
            metrics = quick_metrics(cfg, trained_policy(model, cfg))
            evaluations.append({"step": step, **metrics})
            run_logger.log_metrics({f"eval/{k}": v for k, v in metrics.items() if v is not None},
                                   step=step)
            if report is not None:
                if saver.last_step != step:
                    saver.save_now(model)
                report({"step": step, **metrics}, ckpt_dir)

        callbacks.append(AtRolloutBoundary(int(cfg.trainer.eval_every), Evaluate(periodic)))
    return callbacks, saver


def train(cfg: DictConfig, run_dir: str | Path, *, report: Reporter | None = None,
          run_logger: Any = None) -> dict[str, Any]:
    """Trains (or resumes) in ``run_dir``, evaluates, and returns the trained agent's metrics.

    ``report(metrics, checkpoint_folder)`` is called after every periodic evaluation and at the
    end (Ray Tune's hook); ``run_logger`` defaults to the one ``cfg.logger`` instantiates.
    """
    validate(cfg)
    with locked(Path(run_dir).resolve()) as folder:
        return _train(cfg, folder, report, run_logger)


def _train(cfg: DictConfig, run_dir: Path, report: Reporter | None, run_logger: Any) -> dict[str, Any]:
    check_run_folder(run_dir)
    meta = _checked_checkpoint(cfg, run_dir / "checkpoints")
    changes = record_config(cfg, run_dir, int((meta or {}).get("num_timesteps", 0)))
    own_logger = run_logger is None
    if own_logger:
        run_logger = hydra.utils.instantiate(cfg.logger)
        run_logger.start(run_dir, OmegaConf.to_container(cfg, resolve=True), name=run_dir.name)
    import torch

    torch.set_num_threads(int(cfg.trainer.torch_threads))
    try:
        if is_learned_prior(cfg.agent):
            from dynamiccl.agents.training import prior_agent

            return _learn_and_ship(cfg, run_dir, run_logger, report, changes, prior_agent)
        if is_evidence_tuner(cfg.agent):
            from dynamiccl.agents.training import evidence_agent

            return _learn_and_ship(cfg, run_dir, run_logger, report, changes, evidence_agent)
        learn = _learn_full_info if is_full_info(cfg.agent) else _learn_sb3
        policy, step, seconds = learn(cfg, run_dir, run_logger, report, changes)
        metrics, ending = _evaluate_and_ship(cfg, policy, run_dir, run_logger, report, step, seconds)
    finally:
        if own_logger:
            run_logger.finish()
    ending()  # the run's last words, after the logger's own (wandb's summary)
    return metrics


def _starting(cfg: DictConfig, run_dir: Path, ckpt: Path, start: int, changes: str | None,
              restored: str) -> int:
    """Records and says where training starts; ``restored`` says what a run resumed from ``ckpt``
    got back. Returns the step training ends at."""
    total = int(cfg.trainer.total_timesteps)
    earlier = (run_dir / "train_state.json").is_file()  # a run started here before
    write_text_atomic(run_dir / "train_state.json", json.dumps(
        {"started_at_step": start, "resumed": start > 0, "total_timesteps": total}, indent=2))
    if changes:
        _console(changes)
    if start >= total:  # rollouts (rounds) are whole, so a run may end past total_timesteps
        past = " (whole rollouts end past trainer.total_timesteps)" if start > total else ""
        _console(f"training already finished at step {start} of {total}{past}: {ckpt}; "
                 "evaluating it")
    elif start:
        _console(f"resuming at step {start} of {total} from {ckpt} ({restored})")
    elif earlier:
        _console(f"no checkpoint in {ckpt.parent} to resume from (the earlier run stopped before "
                 f"its first, due at step {int(cfg.trainer.checkpoint_every)}): training "
                 f"{cfg.agent.name} from step 0 for {total} steps")
    else:
        _console(f"training {cfg.agent.name} for {total} steps in {run_dir}")
    return total


def _stopped(step: int, total: int, ckpt: Path, run_dir: Path) -> Interrupted:
    return Interrupted(f"interrupted: checkpoint saved at step {step} of {total} in {ckpt}; resume "
                       f"with the same command and hydra.run.dir={run_dir}")


def _stopped_after_training(step: int, model_file: Path, run_dir: Path) -> Interrupted:
    return Interrupted(f"interrupted after training finished: model saved at step {step} in "
                       f"{model_file}; evaluate it with the same command and hydra.run.dir={run_dir}")


def _learn_sb3(cfg: DictConfig, run_dir: Path, run_logger: Any, report: Reporter | None,
               changes: str | None) -> tuple[SB3Policy, int, float]:
    """Trains (or resumes) an SB3 agent; returns its policy, the step reached and the seconds."""
    ckpt = run_dir / "checkpoints" / "last.zip"
    env = make_training_env(cfg)
    model, start, restored = _load_or_build(cfg, env, ckpt)
    total = _starting(cfg, run_dir, ckpt, start, changes, "environments and generators restored"
                      if restored else "the checkpoint holds no environment state: environments "
                      "start afresh")
    model.set_logger(_sb3_logger(run_dir, run_logger, start))
    interrupt = Interrupt()
    before = trained_seconds(run_dir / "checkpoints", start) if start else 0.0
    began = time.perf_counter()

    def clock() -> float:
        """Seconds of training over every segment of the run, up to now."""
        return before + time.perf_counter() - began

    callbacks, saver = _callbacks(cfg, model, run_dir, run_logger, start, report, interrupt, clock)
    if total > start:
        with interrupt.installed():
            model.learn(total - start, callback=callbacks, reset_num_timesteps=start == 0,
                        progress_bar=bool(cfg.trainer.progress_bar))
    seconds = clock()
    if interrupt.saved_at is not None:
        raise _stopped(interrupt.saved_at, total, ckpt, run_dir)
    step = int(model.num_timesteps)
    if step > start:
        saver.save_now(model)
        save_checkpoint(model, run_dir / "model.zip", str(cfg.agent.name))
    env.close()
    if interrupt.requested:
        raise _stopped_after_training(step, run_dir / "model.zip", run_dir)
    from dynamiccl.agents.training.training_plots import plot_training

    plot_training(run_dir, str(cfg.agent.name))
    return trained_policy(model, cfg), step, seconds


class _AtMultiples:
    """True at the first round boundary past each multiple of ``every`` (never for 0), counted from
    multiples, so a resumed run fires at the same steps as the uninterrupted one (as
    :class:`~dynamiccl.agents.training.callbacks.AtRolloutBoundary` does for SB3)."""

    def __init__(self, every: int, start: int) -> None:
        self.every = every
        self.last = start - start % every if every else 0

    def __call__(self, step: int) -> bool:
        if not self.every or step - self.last < self.every:
            return False
        self.last = step - step % self.every
        return True


def _learn_rounds(cfg: DictConfig, run_dir: Path, run_logger: Any, report: Reporter | None,
                  changes: str | None, agent: RoundAgent, evaluate: Callable[[Any], dict[str, Any]],
                  evaluated: tuple[str, str]) -> tuple[Any, int, float]:
    """Trains (or resumes) a learner that learns in rounds (``agent``: the ``AGENT`` of its pipeline
    module, e.g. :mod:`~dynamiccl.agents.training.full_info_agent`): its curve to the progress CSV
    and the run logger, checkpoints and evaluations (``evaluate(learner)``; ``evaluated``: the
    metric the training curve shows of them, and its label) at round boundaries, Ctrl-C saves
    first. Returns the learner, the step reached and the seconds spent."""
    import csv

    from dynamiccl.agents.shipping.progress import progress_bar

    ckpt_dir = run_dir / "checkpoints"
    last = ckpt_dir / "last.pt"
    if last.is_file():
        learner, restored = agent.load_checkpoint(last)
    else:
        learner, restored = agent.build(cfg.agent, int(cfg.seed)), False
    start = learner.samples_seen
    total = _starting(cfg, run_dir, last, start, changes, "optimizer and generator restored"
                      if restored else "the checkpoint holds only the network: optimizer and "
                      "generator start afresh")
    saved_at = start if restored else None
    seconds = trained_seconds(ckpt_dir, start) if start else 0.0  # over every segment of the run

    def checkpoint() -> None:
        """Saves the learner at this round boundary (once)."""
        nonlocal saved_at
        if saved_at != learner.samples_seen:
            agent.save_checkpoint(learner, last)
            record_checkpoint(ckpt_dir, learner.samples_seen, seconds,
                              parameters_digest(learned_state(learner)))
            saved_at = learner.samples_seen

    checkpoint_due = _AtMultiples(int(cfg.trainer.checkpoint_every), start)
    eval_due = _AtMultiples(int(cfg.trainer.eval_every), start)
    evaluations = _Evaluations(run_dir / "evaluations.jsonl", start)
    interrupt = Interrupt()
    progress_file = run_dir / (f"progress_from_{start}.csv" if start else "progress.csv")
    columns = ["time/total_timesteps", "train/loss", agent.curve[0]]
    bar = progress_bar(f"training {cfg.agent.name}", total) if cfg.trainer.progress_bar \
        else nullcontext(None)
    with progress_file.open("w", newline="") as fh, interrupt.installed(), bar as advance:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        while learner.samples_seen < total:
            began = time.perf_counter()
            before = learner.samples_seen
            data = learner.draw_round()
            fresh = agent.fresh_loss(learner, data)  # before learning from these new systems
            loss = learner.train_round(data)
            seconds += time.perf_counter() - began
            step = learner.samples_seen
            curve = {"train/loss": loss, agent.curve[0]: fresh}
            writer.writerow({"time/total_timesteps": step, **curve})
            fh.flush()
            run_logger.log_metrics(curve, step=step)
            if advance is not None:
                advance(step - before)
            if checkpoint_due(step) or interrupt.requested:
                checkpoint()
            if eval_due(step) and step < total:  # the last round is evaluated at the end
                metrics = evaluate(learner)
                evaluations.append({"step": step, **metrics})
                run_logger.log_metrics({f"eval/{k}": v for k, v in metrics.items() if v is not None},
                                       step=step)
                if report is not None:
                    checkpoint()
                    report({"step": step, **metrics}, ckpt_dir)
            if interrupt.requested:
                raise _stopped(step, total, last, run_dir)
    step = learner.samples_seen
    if step > start:
        checkpoint()
        agent.save_checkpoint(learner, run_dir / "model.pt", resume=False)
    from dynamiccl.agents.training.training_plots import plot_training

    plot_training(run_dir, str(cfg.agent.name), agent.curve, evaluated)
    return learner, step, seconds


def _learn_full_info(cfg: DictConfig, run_dir: Path, run_logger: Any, report: Reporter | None,
                     changes: str | None) -> tuple[Any, int, float]:
    """Trains (or resumes) the full-information learner; returns its policy, the step reached and
    the seconds."""
    from dynamiccl.agents.training import full_info_agent as agent
    from dynamiccl.agents.training.training_plots import ORACLE_SHARE

    name = str(cfg.agent.name)
    learner, step, seconds = _learn_rounds(cfg, run_dir, run_logger, report, changes, agent.AGENT,
                                           lambda learner: quick_metrics(cfg, learner.policy(name=name)),
                                           ORACLE_SHARE)
    return learner.policy(name=name), step, seconds


def _learn_and_ship(cfg: DictConfig, run_dir: Path, run_logger: Any, report: Reporter | None,
                    changes: str | None, agent: Any) -> dict[str, Any]:
    """Trains (or resumes) a round learner that is scored on its own validation and ships a file
    rather than a policy (``agent``: :mod:`~dynamiccl.agents.training.prior_agent`, the learned
    prior's ``learned_prior.npz``; :mod:`~dynamiccl.agents.training.evidence_agent`, the evidence
    tuner's ``evidence_tuner.json``): validates it, writes the file and the metrics; returns them."""
    learner, step, seconds = _learn_rounds(cfg, run_dir, run_logger, report, changes, agent.AGENT,
                                           agent.validate, agent.EVALUATED)
    metrics = agent.validate(learner, final=True)
    shipped = agent.ship(cfg, learner, run_dir, metrics)
    out = run_dir / "eval"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.json", json.dumps(metrics, indent=2))
    run_logger.log_metrics({f"eval/{k}": v for k, v in metrics.items()}, step=step)
    metrics = {**metrics, "step": step, "train_seconds": seconds}
    write_text_atomic(run_dir / "metrics.json", json.dumps(metrics, indent=2))
    if report is not None:
        report(metrics, run_dir / "checkpoints")
    else:  # a sweep prints its own table
        _console(agent.summary(metrics, shipped))
    return metrics


def _evaluate_and_ship(cfg: DictConfig, policy: Any, run_dir: Path, run_logger: Any,
                       report: Reporter | None, step: int,
                       seconds: float) -> tuple[dict[str, Any], Callable[[], None]]:
    """The trained policy against the baselines, then exported and scored as shipped (``deploy``).
    Returns its metrics and what prints the results: the table, then what the file ships and what
    next (nothing in a sweep, which prints its own table)."""
    metrics, reports = evaluate_run(cfg, policy, run_dir, run_logger, step)
    shipment = export_and_score(cfg, policy, run_dir)
    metrics.update(step=step, train_seconds=seconds)
    write_text_atomic(run_dir / "metrics.json", json.dumps(metrics, indent=2))
    if report is not None:
        report(metrics, run_dir / "checkpoints")
        return metrics, lambda: None

    def ending() -> None:
        from dynamiccl.agents.shipping.evaluate import print_table

        rows = [*reports, *([shipment.report] if shipment else [])]
        print_table(rows, title=f"{cfg.eval.suite} suite: {rows[0].scenarios} calls "
                                f"(results in {run_dir / 'eval'})")
        if shipment:
            _console(what_next(shipment, reports[-1], str(cfg.eval.suite)))

    return metrics, ending


def refuse_search(command: str) -> None:
    """``train hparams_search=…`` (also with ``-m``) would ignore the search space: say where it runs."""
    from hydra.core.hydra_config import HydraConfig

    search = HydraConfig.get().runtime.choices.get("hparams_search")
    if command == "train" and search not in (None, "null"):
        raise ConfigCheckError(f"hparams_search={search} is a Ray Tune search; run it with "
                               f"`dynamiccl sweep hparams_search={search}`")


#: Overrides that pick the systems and calls SB3 agents train on (``scenario.systems=[...]`` is
#: profiler/README.md's calibrate -> train step).
SYSTEM_KEYS = ("scenario.systems", "scenario.workloads", "topology", "workload")


def refuse_ignored_systems(cfg: DictConfig, overrides: list[str]) -> None:
    """The full-information learner draws fresh random systems (``agent.model.systems=random``),
    not the ``scenario`` group's; a scenario, topology or workload given on the command line
    (profiler/README.md's calibrate -> train flow) would be ignored without a word, so it is refused
    in one line that names how to learn on those systems."""
    if not is_full_info(cfg.agent) or OmegaConf.select(cfg, "agent.model.systems") != "random":
        return
    given = [o for o in overrides if o.lstrip("+~").split("=")[0] in SYSTEM_KEYS
             or o.lstrip("+~").split("=")[0].split(".")[0] in SYSTEM_KEYS]
    if given:
        raise ConfigCheckError(
            f"{given[0]}: agent=full_info learns on random systems (agent.model.systems=random) and "
            "would ignore it; to learn on your systems give a scenario file that lists them, "
            "agent.model.systems=FILE.yaml, or train agent=maskable_ppo on the scenario")


@hydra.main(version_base="1.3", config_path="pkg://dynamiccl.configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns the oracle share so Hydra multirun sweeps can use it."""
    from hydra.core.hydra_config import HydraConfig

    with user_errors_exit("train"):
        refuse_search("train")
        refuse_ignored_systems(cfg, list(HydraConfig.get().overrides.task))
        metrics = train(cfg, HydraConfig.get().runtime.output_dir)
    return metrics.get("oracle_share")


@contextmanager
def user_errors_exit(command: str) -> Iterator[None]:
    """Inside a Hydra app, a bad config or run folder ends the run with one line and exit code 2,
    Ctrl-C with one line and exit code 130 (Hydra would otherwise print a traceback)."""
    try:
        yield
    except (ConfigCheckError, ConfigError, FileNotFoundError) as exc:
        print(f"dynamiccl {command}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as exc:
        print(f"dynamiccl {command}: {exc}", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print(f"dynamiccl {command}: interrupted; nothing saved since the last checkpoint",
              file=sys.stderr)
        sys.exit(130)
