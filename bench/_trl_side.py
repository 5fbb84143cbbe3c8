"""B1's TRL side: a GRPOTrainer run that pauses after every step and reports how long it took.

Runs in bench/.venv (which has trl, and mua for the identical tiny model and tokenizer):
`bench/.venv/bin/python -m bench._trl_side MODEL NUM_STEPS`. It prints one JSON line per event
on stdout (`{"ready": true}`, then `{"step_s": ...}` after each optimizer step) and waits for a
line on stdin before each step (`go`, or `stop` to end). The step time is measured by a trainer
callback from `on_step_begin` to `on_step_end`: generation, rewards, loss, backward, gradient
clipping and the optimizer step of one `trainer.train()` step, nothing of the pauses. Each report
also carries `generation_s`, the part spent generating and scoring completions, and the
`completions` and `completion_tokens` it generated (B1 fails a step that generated nothing).
Everything TRL prints goes to stderr, so stdout carries only the protocol.
The configuration is docs/benchmarks.md's; lr_scheduler_type="constant" matches mua's constant lr.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from bench import _b1_task as task


def _make_callback(protocol_out):
    from transformers import TrainerCallback

    def wait_for_go() -> bool:
        line = sys.stdin.readline().strip()
        return line == "go"

    class PauseAndReport(TrainerCallback):
        def __init__(self):
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            dt = time.perf_counter() - self.t0
            report = {
                "step_s": dt,
                "generation_s": _GENERATION_S.pop("step", 0.0),
                "completions": _GENERATION_S.pop("completions", 0.0),
                "completion_tokens": _GENERATION_S.pop("completion_tokens", 0.0),
            }
            protocol_out.write(json.dumps(report) + "\n")
            protocol_out.flush()
            if not wait_for_go():
                control.should_training_stop = True

    return PauseAndReport(), wait_for_go


_GENERATION_S: dict[str, float] = {}


def _time_generation(trainer_cls) -> None:
    """Add the seconds of each step's generation (with its reward scoring) to _GENERATION_S,
    and the completions it generated and their tokens (what B1 checks the step did)."""
    original = trainer_cls._generate_and_score_completions

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            out = original(self, *args, **kwargs)
        finally:
            _GENERATION_S["step"] = _GENERATION_S.get("step", 0.0) + time.perf_counter() - t0
        mask = out.get("completion_mask") if isinstance(out, dict) else None
        if mask is not None:
            _GENERATION_S["completions"] = _GENERATION_S.get("completions", 0.0) + mask.shape[0]
            _GENERATION_S["completion_tokens"] = _GENERATION_S.get(
                "completion_tokens", 0.0
            ) + float(mask.sum())
        return out

    trainer_cls._generate_and_score_completions = timed


def reward_func(completions, **kwargs) -> list[float]:
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [task.reward_of(t) for t in texts]


def main(model_path: str, num_steps: int) -> None:
    protocol_out = sys.stdout
    sys.stdout = sys.stderr
    with tempfile.TemporaryDirectory(prefix="mua-b1-trl-") as output_dir:
        run_trl(model_path, num_steps, output_dir, protocol_out)
    protocol_out.write(json.dumps({"done": True}) + "\n")
    protocol_out.flush()


def run_trl(model_path: str, num_steps: int, output_dir: str, protocol_out) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mua.models import load_model, load_tokenizer

    torch.set_num_threads(task.NUM_THREADS)
    tokenizer = load_tokenizer(model_path)
    model = load_model(model_path, dtype="float32", seed=task.SEED)
    dataset = Dataset.from_list([{"prompt": task.chat_prompt(i)} for i in range(task.NUM_PROMPTS)])
    config = GRPOConfig(
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        logging_steps=10_000,
        disable_tqdm=True,
        max_steps=num_steps,
        seed=task.SEED,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=task.NUM_PROMPTS * task.NUM_GENERATIONS,
        num_generations=task.NUM_GENERATIONS,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        max_completion_length=task.MAX_NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=task.LEARNING_RATE,
        lr_scheduler_type="constant",
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=task.CLIP_EPSILON,
        num_iterations=1,
        use_vllm=False,
    )
    _time_generation(GRPOTrainer)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_func,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    callback, wait_for_go = _make_callback(protocol_out)
    trainer.add_callback(callback)
    protocol_out.write(json.dumps({"ready": True, "trl": __import__("trl").__version__}) + "\n")
    protocol_out.flush()
    if wait_for_go():
        trainer.train()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(task.NUM_THREADS))
    main(sys.argv[1], int(sys.argv[2]))
