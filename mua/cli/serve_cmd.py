"""`mua serve`: serve a model over SGLang's native protocol and an OpenAI chat endpoint.

The server (mua.serve) wraps mua's transformers engine; this module parses flags, starts it and
blocks until interrupted. It serves a local model as the simulated user (`user.kind: llm`,
`user.base_url: http://127.0.0.1:PORT/v1`) and lets the SGLang client run without a GPU.
"""

from __future__ import annotations

import typer

HELP = """Serve a model over SGLang's HTTP protocol (/generate, weight updates, memory release)
and an OpenAI-compatible POST /v1/chat/completions.

Examples:

  mua serve --model tiny:qwen2-1m --port 30000

  mua serve --model ./my_model --device cuda --dtype bfloat16

Then point a simulated user at it: user.kind=llm user.base_url=http://127.0.0.1:30000/v1
"""


def register(app: typer.Typer) -> None:
    @app.command("serve", help=HELP)
    def serve(
        model: str = typer.Option(
            ..., "--model", "-m", help="tiny:<preset>, a local HF folder, or a hub id."
        ),
        host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
        port: int = typer.Option(30000, help="Port to listen on (0 picks a free one)."),
        dtype: str = typer.Option("float32", help="float32, bfloat16 or float16."),
        device: str | None = typer.Option(
            None, help="cpu or cuda (default: where the model loads)."
        ),
        max_batch_size: int = typer.Option(64, help="Most requests generated in one batch."),
        sglang_release: str = typer.Option(
            None,
            "--sglang-release",
            help="The SGLang release to emulate: its version, memory tags, weight-update "
            "sessions and what it refuses (default: the newest the contract tests cover).",
        ),
    ) -> None:
        import time

        from mua.cli.common import console
        from mua.engines.sglang.releases import COVERED_RELEASES, NEWEST_COVERED
        from mua.errors import UsageError
        from mua.serve import serve_model

        if not 0 <= port <= 65535:
            raise UsageError(f"--port {port} is out of range; give 0..65535")
        sglang_release = sglang_release or NEWEST_COVERED
        if sglang_release not in COVERED_RELEASES:
            raise UsageError(
                f"--sglang-release {sglang_release} is not emulated; give one of "
                f"{', '.join(COVERED_RELEASES)}"
            )
        try:
            server = serve_model(
                model,
                host=host,
                port=port,
                dtype=dtype,
                device=device,
                max_batch_size=max_batch_size,
                sglang_release=sglang_release,
            )
        except OSError as err:
            raise UsageError(
                f"cannot listen on {host}:{port} ({err.strerror or err}); pick another --port"
            ) from None
        console().print(
            f"mua serve: {model} at {server.url} as SGLang {sglang_release} "
            f"(OpenAI base_url {server.url}/v1); Ctrl-C stops"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
