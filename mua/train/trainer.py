"""The Trainer: a run's pieces on one rank, its checkpoints and exports, and what follows each step.

Setup: seeds, tokenizer, policy (FSDP2), optimizer and schedule, data, resume, tracker (rank 0).
`run_step` calls `rl_step` or `sft_step`; `after_step` logs, applies the stop rules, checkpoints
every `checkpoint.save_freq` steps and exports `hf/global_step_N` every `export_hf_every`-th;
`finish` writes the last checkpoint and `hf/final`. Not here: launching, the step loop
(`mua.train.loop`), the RL step's parts (`rl_setup`), the engine's weights (`engine_sync`).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from pathlib import Path

import torch

from mua.distributed import DistInfo, barrier, broadcast_object
from mua.errors import RunFailure
from mua.train import checkpoint as ckpt
from mua.train.data import TaskSampler, load_sft_samples
from mua.train.mix_sampler import build_task_sampler
from mua.train.optim import build_optimizer, build_scheduler
from mua.train.partial_rollouts import close_in_flight, in_flight_checkpoint, restore_in_flight
from mua.train.rl_setup import PolicyState
from mua.train.run_dir import promote
from mua.train.sft import sft_steps_total
from mua.train.trained_model import export_hf, hf_side_files, load_policy, load_tokenizer_for


class Preempted(Exception):
    """SIGTERM stopped the run between two steps, after a checkpoint of the last one."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    def __init__(
        self,
        recipe,
        run_dir: str | Path,
        dist: DistInfo,
        resume: bool = True,
        resume_from: str | Path | None = None,
    ):
        self.recipe = recipe
        self.run_dir = Path(run_dir)
        self.dist = dist
        self.resume = resume
        self.resume_from = Path(resume_from) if resume_from else None
        seed_everything(recipe.data.seed)
        self.tokenizer = load_tokenizer_for(recipe)
        self.model = load_policy(recipe, dist.mesh)
        self.optimizer = build_optimizer(self.model.parameters(), recipe.optim)
        self.is_sft = recipe.algo.kind == "sft"
        if self.is_sft:
            self._setup_sft()
            optimizer_steps = self.total_steps
        else:
            self._setup_rl()
            optimizer_steps = self.total_steps * recipe.algo.epochs * recipe.algo.mini_batches
        self.scheduler = build_scheduler(self.optimizer, recipe.optim, optimizer_steps)
        self.start_step = self._maybe_resume()
        if self.rl is not None:
            self.rl.sync.mark_stale()  # resumed weights reach the engine before its next use
        self.saved_at = self.start_step  # the step of the latest checkpoint written or resumed
        from mua.track import Tracker
        from mua.train.guards import StepWatch

        self.tracker = Tracker(
            recipe, self.run_dir, enabled=dist.is_main, start_step=self.start_step
        )
        self.watch = StepWatch(recipe.stop, show=dist.is_main)

    def _setup_sft(self) -> None:
        r = self.recipe
        self.samples = load_sft_samples(
            r.data.train_files, self.tokenizer, r.rollout.max_total_tokens
        )
        self.sampler = TaskSampler([self.samples], None, r.data.seed, r.data.shuffle)
        self.total_steps = sft_steps_total(
            len(self.samples), r.algo.batch_size, r.algo.epochs, r.total_steps
        )
        self.rl = None

    def _setup_rl(self) -> None:
        from mua.train.rl_setup import build_rl_parts

        r = self.recipe
        self.sampler = build_task_sampler(r)
        self.total_steps = r.total_steps
        optimizer_steps = r.total_steps * r.algo.epochs * r.algo.mini_batches
        self.rl = build_rl_parts(
            r, self.dist, self.model, self.tokenizer, optimizer_steps, sampler=self.sampler
        )

    @property
    def state(self) -> PolicyState:
        """The policy the RL step trains and what updates it (the step changes them in place)."""
        return PolicyState(self.model, self.optimizer, self.scheduler, self.tokenizer)

    def run_step(self, step: int) -> dict[str, float]:
        """Step `step` of the run (`sft_step` on a batch of samples, else `rl_step`): its metrics."""
        r, dist = self.recipe, self.dist
        if self.is_sft:
            from mua.train.sft import sft_step

            return sft_step(
                self.model,
                self.optimizer,
                self.scheduler,
                self.sampler.next_tasks(r.algo.batch_size),
                rank=dist.rank,
                world_size=dist.world_size,
                token_budget=r.parallel.micro_batch_tokens,
                grad_clip=r.optim.grad_clip,
                device=dist.device,
                router_aux_coef=r.algo.router_aux_coef,
            )
        from mua.train.rl import rl_step

        return rl_step(
            step,
            recipe=r,
            dist=dist,
            state=self.state,
            parts=self.rl,
            sampler=self.sampler,
            tracker=self.tracker,
        )

    # ---- checkpoints -------------------------------------------------------------------
    def _maybe_resume(self) -> int:
        if self.dist.is_main:
            ckpt.remove_partial(self.run_dir)
        barrier()
        if not self.resume:
            return 0
        latest = self.resume_from or ckpt.latest_checkpoint(self.run_dir)
        if latest is None:
            return 0
        self._verify(latest)
        from torch.distributed.checkpoint.api import CheckpointException

        critic = self.rl.critic if self.rl is not None else None
        try:
            state = ckpt.load_checkpoint(
                latest,
                model=self.model,
                optimizer=self.optimizer,
                rank=self.dist.rank,
                critic=critic.model if critic else None,
                critic_optimizer=critic.optimizer if critic else None,
            )
        except RunFailure:  # a refusal that says what it is (e.g. a file that is not plain data)
            raise
        except (Exception, CheckpointException) as e:  # damage the checksums could not see
            raise RunFailure(
                ckpt.damaged_message(self.run_dir, latest, _first_line(_cause(e)))
            ) from None
        if critic is not None and "critic_scheduler" in state:
            critic.scheduler.load_state_dict(state["critic_scheduler"])
        self.scheduler.load_state_dict(state["scheduler"])
        self._apply_recipe_optim()
        self.sampler.load_state_dict(state["data"])
        if self.rl is not None:  # groups in flight at the checkpoint start again (async RL)
            restore_in_flight(self.rl, self.recipe, state.get("in_flight", []), self.sampler)
        barrier()  # every rank loaded it: a staged recipe now becomes the run's
        if self.dist.is_main:
            promote(self.run_dir)
            print(f"resumed from {latest} (step {state['step']})", flush=True)
        return int(state["step"])

    def _verify(self, path: Path) -> None:
        """Rank 0 checks the checkpoint's checksums; every rank raises the same one-line error."""
        from mua.train.guards import RunStopped

        problem = ckpt.checkpoint_problem(path) if self.dist.is_main else None
        problem = broadcast_object(problem)
        if problem is not None:
            raise RunStopped(ckpt.damaged_message(self.run_dir, path, problem))

    def _apply_recipe_optim(self) -> None:
        """The recipe's optim.lr, betas and weight_decay take effect on resume (the optimizer and
        schedule states loaded from the checkpoint carry the values the run started with; a
        changed recipe is only resumed with --allow-recipe-change)."""
        cfg = self.recipe.optim
        for group in self.optimizer.param_groups:
            group["betas"] = tuple(cfg.betas)
            group["weight_decay"] = cfg.weight_decay
            group["initial_lr"] = cfg.lr
        self.scheduler.base_lrs = [cfg.lr for _ in self.optimizer.param_groups]
        factor = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr * factor

    def save(self, step: int) -> None:
        state = {
            "data": self.sampler.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "world_size": self.dist.world_size,
            "algo": self.recipe.algo.kind,
        }
        critic = self.rl.critic if self.rl is not None else None
        if self.rl is not None and self.rl.carry is not None:  # collective
            state["in_flight"] = in_flight_checkpoint(self.rl)
        if critic is not None:
            state["critic_scheduler"] = critic.scheduler.state_dict()
        with self._write_failure(f"checkpoint global_step_{step}"):
            self._save(step, state, critic)

    def _save(self, step: int, state: dict, critic) -> None:
        ckpt.save_checkpoint(
            self.run_dir,
            step,
            model=self.model,
            optimizer=self.optimizer,
            trainer_state=state,
            rank=self.dist.rank,
            keep_last=self.recipe.checkpoint.keep_last,
            hf_files=hf_side_files(self.model, self.tokenizer, self.recipe.model),
            critic=critic.model if critic else None,
            critic_optimizer=critic.optimizer if critic else None,
        )

    def export(self, name: str, step: int) -> None:
        """Write `run_dir/hf/<name>` from the live model (collective: every rank calls it)."""
        info = {"step": step}
        latest = ckpt.latest_checkpoint(self.run_dir)
        if latest is not None and latest.name == f"global_step_{step}":
            info["checkpoint"] = str(latest.resolve())
        with self._write_failure(f"export hf/{name}"):
            export_hf(
                self.model,
                self.tokenizer,
                self.run_dir / "hf" / name,
                self.recipe.model.dtype,
                self.dist.is_main,
                info=info,
            )

    @contextmanager
    def _write_failure(self, what: str):
        """A failed write (disk full, permissions) becomes one line naming what was being written
        and what is still complete; the partial folder is removed when the run resumes."""
        from torch.distributed.checkpoint.api import CheckpointException

        try:
            yield
        except (OSError, CheckpointException) as e:
            latest = ckpt.latest_checkpoint(self.run_dir)
            kept = f"the latest complete checkpoint is {latest}" if latest else "no checkpoint yet"
            raise RunFailure(
                f"cannot write the {what} in {self.run_dir} ({_write_cause(e, self.run_dir)}); "
                f"{kept}; free space and run the same command to resume"
            ) from None

    def _periodic_export_due(self, step: int) -> bool:
        """True after every `export_hf_every`-th scheduled checkpoint (counted by step, so a
        resumed run exports the same steps as an uninterrupted one)."""
        cfg = self.recipe.checkpoint
        return bool(cfg.export_hf_every) and (step // cfg.save_freq) % cfg.export_hf_every == 0

    # ---- around each step (the loop itself is `mua.train.loop.train_rank`) -------------------
    def after_step(self, step: int, metrics: dict[str, float], *, seconds: float) -> None:
        """Log the step, apply the stop rules (RL), and checkpoint and export when due."""
        cfg = self.recipe.checkpoint
        metrics["time/step_s"] = seconds
        metrics["epoch"] = float(self.sampler.epoch)
        self.tracker.log_step(step, metrics)
        if not self.is_sft:
            self.watch.after_step(step, metrics)
        if cfg.save_freq and step % cfg.save_freq == 0:
            self.save(step)
            self.saved_at = step
            if self._periodic_export_due(step):
                self.export(f"global_step_{step}", step)

    def save_unless_saved(self, step: int) -> None:
        """A checkpoint of `step` (the last finished one) unless it is saved or resumed from."""
        if step > self.saved_at:
            self.save(step)
            self.saved_at = step

    def finish(self) -> None:
        """After the last step: its checkpoint unless saved already, `hf/final`, and a barrier."""
        if self.saved_at != self.total_steps and self.total_steps > self.start_step:
            self.save(self.total_steps)
        if self.rl is not None:  # async RL: the parked conversations' envs close (after the
            close_in_flight(self.rl)  # checkpoint, which records their tasks)
        if self.recipe.checkpoint.export_hf_at_end:
            self.export("final", self.total_steps)
        # Ranks leave together: a rank that tears its process group down while rank 0 is
        # still writing the export can abort inside the gloo backend.
        barrier()

    @contextmanager
    def tracked(self):
        """The steps' block: the tracker's run ends FINISHED when it completes, KILLED on Ctrl-C
        or SIGTERM (`Preempted`), FAILED otherwise; the rollout engine is closed in every case."""
        status = "FAILED"
        try:
            yield
            status = "FINISHED"
        except (KeyboardInterrupt, Preempted):
            status = "KILLED"
            raise
        finally:
            if self.rl is not None:
                import asyncio

                close_in_flight(self.rl)  # a run that stopped early: parked envs still close
                asyncio.run(self.rl.sync.close())
            self.tracker.close(status)


def _cause(error: BaseException) -> BaseException:
    """The exception inside a DCP CheckpointException ({rank: (exception, traceback)}); a Ctrl-C
    that DCP wrapped is raised again as what it is."""
    failures = getattr(error, "failures", None)
    cause = next(iter(failures.values()))[0] if failures else error
    if isinstance(cause, KeyboardInterrupt):
        raise KeyboardInterrupt
    return cause


_NEARLY_FULL = 1 << 20  # bytes: less free space than this means the disk filled up


def _write_cause(error: BaseException, folder: Path) -> str:
    """Why a write failed: torch's writers report a full disk as a position mismatch, not as
    ENOSPC, so a filesystem left with almost no free space is named as the cause."""
    import shutil

    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    if free is not None and free < _NEARLY_FULL:
        return f"no space left on device: {free // 1024} KiB free"
    return _first_line(_cause(error))


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]
