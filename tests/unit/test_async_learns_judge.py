"""The judgement of scripts/async_learns.py (asynchronous vs synchronous quickstart, paired by seed).

Its statistics are checked against plain references on fixed inputs (Fisher's test against an
enumeration of every split of the runs, the sign-flip test against its definition) and its verdict
against inputs built to pass or to fail each part of the criterion in docs/async_rl.md.
"""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import async_learns as al  # noqa: E402


def _fisher_by_enumeration(a_hits: int, a_n: int, b_hits: int, b_n: int) -> float:
    runs = [1] * (a_hits + b_hits) + [0] * (a_n + b_n - a_hits - b_hits)
    splits = list(itertools.combinations(range(len(runs)), a_n))
    as_extreme = sum(sum(runs[i] for i in split) >= a_hits for split in splits)
    return as_extreme / len(splits)


@pytest.mark.parametrize("case", [(2, 6, 0, 6), (4, 6, 1, 6), (0, 5, 3, 7), (3, 4, 3, 4)])
def test_fisher_matches_enumeration(case):
    assert al.fisher_more_p(*case) == pytest.approx(_fisher_by_enumeration(*case), abs=1e-12)


def test_sign_flip_p_counts_patterns_at_least_as_extreme():
    diffs = [0.02, -0.01, 0.04]
    shifted = [d + 0.03 for d in diffs]
    total = sum(shifted)
    expected = (
        sum(
            sum(s * v for s, v in zip(p, shifted)) >= total - 1e-12
            for p in itertools.product((1, -1), repeat=3)
        )
        / 8
    )
    assert al.sign_flip_p(diffs, 0.03) == expected
    assert al.sign_flip_p([0.0] * 12, 0.03) == 1 / 4096  # every seed level: H0 rejected


def test_bootstrap_lower_bound_of_constant_and_of_one_outlier():
    assert al.bootstrap_lower_bound([0.01] * 8) == pytest.approx(0.01)
    with_collapse = [0.0] * 11 + [-0.35]
    assert al.bootstrap_lower_bound(with_collapse) < -0.03 < al.bootstrap_lower_bound([0.0] * 12)


def _rows(sync, asyn, sync_collapsed=None, async_collapsed=None):
    n = len(sync)
    return [
        {
            "seed": i,
            "sync": sync[i],
            "async": asyn[i],
            "sync_collapsed": (sync_collapsed or [False] * n)[i],
            "async_collapsed": (async_collapsed or [False] * n)[i],
        }
        for i in range(n)
    ]


SYNC = [0.355, 0.301, 0.307, 0.396, 0.387, 0.359, 0.33, 0.34, 0.37, 0.32, 0.35, 0.36]


def test_verdict_passes_when_async_matches_sync_within_noise():
    asyn = [s + d for s, d in zip(SYNC, [0.01, -0.01, 0.02, -0.02, 0.0, 0.01] * 2)]
    verdict = al.judge(_rows(SYNC, asyn))
    assert verdict["passes"], verdict


def test_verdict_fails_on_one_collapsed_async_run():
    asyn = list(SYNC)
    asyn[1] = 0.0
    collapsed = [i == 1 for i in range(12)]
    verdict = al.judge(_rows(SYNC, asyn, async_collapsed=collapsed))
    assert not verdict["a2_noninferior"] and not verdict["passes"], verdict
    assert verdict["b_no_excess_collapses"]  # one collapse is not a significant excess


def test_verdict_fails_on_a_uniformly_lower_async_reward():
    verdict = al.judge(_rows(SYNC, [s - 0.05 for s in SYNC]))
    assert not verdict["a2_noninferior"] and not verdict["passes"], verdict


def test_verdict_fails_on_four_collapses_against_none():
    collapsed = [i < 4 for i in range(12)]
    verdict = al.judge(_rows(SYNC, list(SYNC), async_collapsed=collapsed))
    assert not verdict["b_no_excess_collapses"] and not verdict["passes"], verdict


def test_run_outcome_reads_reward_stop_and_absence(tmp_path):
    done = tmp_path / "done"
    (done / "eval_rl").mkdir(parents=True)
    (done / "eval_rl" / "summary.json").write_text(
        json.dumps({"gyms": {"guess": {"reward_mean": 0.2}}})
    )
    assert al.run_outcome(done, sft_reward=0.25)["collapsed"]  # ended below its SFT start
    assert not al.run_outcome(done, sft_reward=0.15)["collapsed"]
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "failed.txt").write_text("stop.empty_steps")
    outcome = al.run_outcome(stopped, sft_reward=0.2)
    assert (outcome["reward"], outcome["stopped"], outcome["collapsed"]) == (0.0, True, True)
    assert al.run_outcome(tmp_path / "absent", sft_reward=0.2) is None


def test_sync_name_judges_against_that_folder_not_the_demo_run(tmp_path, capsys):
    def run(folder, reward):
        (folder / "eval_rl").mkdir(parents=True)
        summary = {"gyms": {"guess": {"reward_mean": reward}}}
        (folder / "eval_rl" / "summary.json").write_text(json.dumps(summary))

    for seed, (demo, other, asyn) in enumerate([(0.30, 0.36, 0.35), (0.32, 0.38, 0.37)]):
        start = tmp_path / "sft_start" / f"seed_{seed}"
        (start / "eval_sft").mkdir(parents=True)
        (start / "eval_sft" / "summary.json").write_text(
            json.dumps({"gyms": {"guess": {"reward_mean": 0.25}}})
        )
        run(start, demo)  # the demo's own synchronous run
        run(tmp_path / "sync_other" / f"seed_{seed}", other)
        run(tmp_path / "arm" / f"seed_{seed}", asyn)
    args = ["--seeds", "0-1", "--out", str(tmp_path), "--name", "arm", "--judge-only"]
    assert al.main([*args, "--sync-name", "sync_other"]) in (0, 1)
    verdict = json.loads((tmp_path / "arm" / "judgement.json").read_text())
    assert (verdict["sync_min"], verdict["sync_max"]) == (0.36, 0.38)
    al.main(args)
    verdict = json.loads((tmp_path / "arm" / "judgement.json").read_text())
    assert (verdict["sync_min"], verdict["sync_max"]) == (0.30, 0.32)
