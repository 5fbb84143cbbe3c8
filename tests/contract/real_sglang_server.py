"""Start one SGLang release's real HTTP server on CPU, with the stand-in scheduler process.

Usage (run by `real_server_harness.py`, never imported by pytest or mua):
    PYTHONPATH=<release side folders>:tests/contract:tests/contract/real_server_site \
        python real_sglang_server.py MODEL_DIR PORT

Everything on the way in and out is the release's own code: ServerArgs (built with
skip_tokenizer_init, device "cpu", load_format "dummy"), `launch_server` with its FastAPI app,
TokenizerManager and warm-up (so /health stays non-200 until the warm-up generate request came
back), and the ZMQ messages. Only the scheduler process is replaced, through the release's hook:
0.5.23 takes `run_scheduler_process_func`; 0.5.5 has no such parameter and starts
`engine.run_scheduler_process`, so that module attribute is set instead (the one thing the hook
later made official). The detokenizer process starts as the release starts it; with
skip_tokenizer_init the scheduler's answers go straight to the TokenizerManager.
"""

from __future__ import annotations

import inspect
import sys

import standin_scheduler


def server_args(model_dir: str, port: int):
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=model_dir,
        host="127.0.0.1",
        port=port,
        skip_tokenizer_init=True,
        device="cpu",
        load_format="dummy",
        dtype="float32",
        tp_size=1,
        mem_fraction_static=0.5,
        enable_memory_saver=False,
        disable_cuda_graph=True,
        log_level="warning",
    )


def main() -> None:
    model_dir, port = sys.argv[1], int(sys.argv[2])
    from sglang.srt.entrypoints import engine, http_server

    args = server_args(model_dir, port)
    hook = standin_scheduler.run_standin_scheduler
    if "run_scheduler_process_func" in inspect.signature(http_server.launch_server).parameters:
        http_server.launch_server(args, run_scheduler_process_func=hook)
    else:
        engine.run_scheduler_process = hook
        http_server.launch_server(args)


if __name__ == "__main__":
    main()
