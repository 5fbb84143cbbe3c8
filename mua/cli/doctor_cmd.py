"""`mua doctor`: check the machine and a model for what training and SGLang rollouts need.

Checks: torch, CUDA devices, NCCL, SGLang (installed, inside the tested version range, importable
on a GPU machine), flash-attn, and, with `--model`, that the model's chat template renders
conversations prefix-stably (multi-turn rollouts append tokens turn by turn and rely on it) and
its size (a mixture of experts: total and active parameters).
Each check is ok, warn (works, slower or CPU-only) or fail (a run that needs it will not work),
with the fix on the same line. Exit code 1 only when a check fails; a CPU-only machine gets
warnings and exit 0. It changes nothing and downloads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import typer

# The SGLang releases whose HTTP protocol mua's client was written against (the `gpu` extra).

HELP = """Check CUDA, NCCL, SGLang, flash-attn and (with --model) the chat template.

Examples:

  mua doctor

  mua doctor --model tiny:qwen3-1m

  mua doctor --model ./Qwen3-1.7B
"""


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str


def check_torch_cuda() -> list[Check]:
    import torch

    checks = [Check("torch", "ok", torch.__version__)]
    if not torch.cuda.is_available():
        checks.append(
            Check(
                "cuda",
                "warn",
                "no CUDA GPU: training and the hf engine run on CPU; "
                "rollout.engine=sglang needs a GPU",
            )
        )
        return checks
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    free, total = torch.cuda.mem_get_info(0)
    checks.append(
        Check(
            "cuda",
            "ok",
            f"{len(names)} GPU(s): {', '.join(sorted(set(names)))}; "
            f"GPU 0 {free / 2**30:.1f}/{total / 2**30:.1f} GiB free",
        )
    )
    return checks


def check_nccl() -> Check:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return Check("nccl", "warn", "not used without CUDA; multi-process CPU runs use gloo")
    if not dist.is_nccl_available():
        return Check("nccl", "fail", "this torch build has no NCCL; install a CUDA build of torch")
    version = ".".join(str(v) for v in torch.cuda.nccl.version())
    return Check("nccl", "ok", f"NCCL {version}")


def _version_tuple(text: str) -> tuple:
    import re

    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def check_engines(has_cuda: bool) -> list[Check]:
    """One check per registered engine whose spec has a `doctor` hook (SGLang: installed, in
    the covered releases); an engine whose spec cannot be loaded fails here."""
    from mua.engines.registry import engine_spec, list_engines

    checks = []
    for name in list_engines():
        try:
            hook = engine_spec(name).doctor
        except Exception as err:  # a broken plugin: named, the other checks still run
            checks.append(Check(name, "fail", f"cannot be loaded ({type(err).__name__}: {err})"))
            continue
        if hook is not None:
            checks.append(Check(name, *hook(has_cuda)))
    return checks


def check_flash_attn(has_cuda: bool) -> Check:
    from mua.models.model_loading import flash_attention_2_version

    version = flash_attention_2_version()
    if version is None:
        why = "models use PyTorch SDPA attention (slower for long sequences)"
        return Check(
            "flash-attn",
            "warn",
            f"FlashAttention-2 not usable; {why}"
            + ("; pip install 'flash-attn>=2.6,<3'" if has_cuda else ""),
        )
    return Check("flash-attn", "ok", f"FlashAttention-2 {version}")


SAMPLE_CONVERSATIONS = [
    [
        {"role": "system", "content": "You are a helpful travel agent."},
        {"role": "user", "content": "Find me a flight to Paris."},
        {"role": "assistant", "content": "Which date would you like to fly?"},
        {"role": "user", "content": "Next Monday, please."},
        {"role": "assistant", "content": "Booked: Monday, 9:40, seat 12A."},
    ],
    {
        "messages": [
            {"role": "user", "content": "What is the weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                    }
                ],
            },
            {"role": "tool", "content": '{"temp_c": 4}'},
            {"role": "assistant", "content": "It is 4 degrees Celsius in Oslo."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You are welcome."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather of a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
    },
]


def check_template(model: str) -> Check:
    from mua.errors import MuaError
    from mua.models import check_prefix_stability, load_tokenizer

    try:
        tokenizer = load_tokenizer(model)
        problems = check_prefix_stability(tokenizer, SAMPLE_CONVERSATIONS)
    except MuaError as err:
        return Check("chat template", "fail", str(err))
    except Exception as err:  # a template that cannot render these conversations at all
        return Check(
            "chat template",
            "fail",
            f"rendering failed ({type(err).__name__}: {err}); "
            "fix the template or use another tokenizer",
        )
    if problems:
        return Check(
            "chat template",
            "fail",
            f"not prefix-stable: {problems[0]} "
            f"({len(problems)} problem(s)); multi-turn rollouts would drop trajectories; "
            "use a template that only appends (e.g. strip the 'think' rewriting)",
        )
    return Check(
        "chat template",
        "ok",
        f"{model}: prefix-stable on {len(SAMPLE_CONVERSATIONS)} sample conversations",
    )


def check_model_size(model: str) -> Check:
    """The model's size, built on the meta device (no weights read): for a mixture of experts
    its total and active parameters and its largest expert tensor (`moe_sizes`)."""
    from mua.errors import MuaError
    from mua.models.model_loading import meta_model
    from mua.train.memory_estimate import moe_sizes

    try:
        built = meta_model(model)
    except MuaError as err:
        return Check("model size", "fail", str(err))
    except Exception as err:  # a config transformers cannot build
        return Check("model size", "warn", f"not built from its config ({type(err).__name__})")
    moe = moe_sizes(built)
    if moe is not None:
        return Check("model size", "ok", moe.describe())
    total = sum(p.numel() for p in built.parameters())
    return Check("model size", "ok", f"dense: {total / 1e6:,.1f}M parameters")


def run_checks(model: str | None) -> list[Check]:
    import torch

    checks = check_torch_cuda()
    has_cuda = torch.cuda.is_available()
    checks += [check_nccl(), *check_engines(has_cuda), check_flash_attn(has_cuda)]
    if model:
        checks += [check_template(model), check_model_size(model)]
    return checks


def register(app: typer.Typer) -> None:
    @app.command("doctor", help=HELP)
    def doctor(
        model: str | None = typer.Option(
            None, "--model", "-m", help="Also check this model's chat template."
        ),
    ) -> None:
        from rich.table import Table

        from mua.cli.common import console

        checks = run_checks(model)
        style = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]fail[/]"}
        table = Table("check", "status", "detail / fix", title="mua doctor")
        for c in checks:
            table.add_row(c.name, style[c.status], c.detail)
        console().print(table)
        failed = [c.name for c in checks if c.status == "fail"]
        if failed:
            console().print(f"[bold red]{len(failed)} check(s) failed:[/] {', '.join(failed)}")
            raise typer.Exit(1)
        warned = sum(c.status == "warn" for c in checks)
        console().print("all checks passed" + (f" ({warned} warning(s))" if warned else ""))
