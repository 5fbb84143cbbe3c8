"""What `mua doctor` says of the installed SGLang (the spec's `doctor` hook): installed, importable
on a GPU machine, inside the releases the contract tests cover. Changes nothing."""

from __future__ import annotations


def install_check(has_cuda: bool) -> tuple[str, str]:
    """(status, detail): `ok`, `warn` (works without it, or an untested release) or `fail`."""
    from mua.engines.sglang.releases import COVERED_RELEASES, is_covered
    from mua.engines.sglang.sglang_engine import sglang_version

    version = sglang_version()
    covered = ", ".join(COVERED_RELEASES)
    if version is None:
        how = "pip install 'mua[gpu]'" if has_cuda else "it needs a CUDA machine"
        return (
            "warn",
            f"not installed; rollout.engine=sglang unavailable ({how}); "
            "the hf engine and `mua serve` work without it",
        )
    if has_cuda:
        try:
            import sglang  # noqa: F401  (the import itself is the check)
        except Exception as err:  # a broken install shows up as any exception
            return (
                "fail",
                f"{version} is installed but does not import ({type(err).__name__}: {err}); "
                "reinstall with pip install 'mua[gpu]'",
            )
    if not is_covered(version):
        return (
            "warn",
            f"{version} is not covered by mua's contract tests (covered: {covered}); the "
            "protocol may differ: pip install 'mua[gpu]'",
        )
    return ("ok", f"{version} (covered by the contract tests: {covered})")
