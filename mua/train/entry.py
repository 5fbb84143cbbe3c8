"""What every torchrun process runs: `python -m mua.train.entry RUN_DIR [--no-resume]`.

Reads only `RUN_DIR/recipe.resolved.yaml`, joins the process group, trains, and leaves the
group. User-facing errors print one line (rank 0) and exit with their code.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mua.train.entry")
    parser.add_argument("run_dir")
    parser.add_argument("--no-resume", action="store_true")
    args = parser.parse_args(argv)

    import torch

    from mua.config import read_resolved
    from mua.dist import destroy, init_distributed
    from mua.errors import MuaError

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    recipe = read_resolved(args.run_dir)
    dist = init_distributed()
    try:
        from mua.train.trainer import Trainer

        Trainer(recipe, args.run_dir, dist, resume=not args.no_resume).fit()
    except MuaError as e:
        if os.environ.get("MUA_DEBUG") == "1":
            raise
        if dist.is_main:
            print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    finally:
        destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
