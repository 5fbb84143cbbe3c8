"""The comparison the algorithm tests share: values equal to hand-computed ones within a tolerance.

Both sides are converted to float64 tensors first, so lists, floats and tensors of any dtype compare
alike; the failure message shows both.
"""

from __future__ import annotations

import torch


def assert_close(actual, expected, tol: float) -> None:
    assert torch.allclose(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
    ), (actual, expected)
