"""``record.gaps``' two-level sums: blocks in float32, the blocks' sums in float64, as exact as
float64 throughout on the tensors lockstep measures (float32, bf16, sizes that are not a
multiple of a block), and float64 where a block leaves float32's range."""

from __future__ import annotations

import math

import pytest
import torch

from lrcheck.record.gaps import BLOCK, along, dot, norm, total


@pytest.mark.parametrize("n", [BLOCK + 1, 3 * BLOCK, 1_000_003])
def test_the_block_sums_are_as_exact_as_float64(n):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, generator=g) * torch.logspace(-6, 2, n)
    b = torch.randn(n, generator=g)
    exact_dot = float(torch.sum(a.double() * b.double()))
    scale = float(torch.sum((a.double() * b.double()).abs()))
    # the products are float32 (one rounding each); the sums add less than that again
    assert abs(dot(a, b) - exact_dot) <= 2 * 2**-24 * scale
    assert norm(a) == pytest.approx(float(torch.linalg.vector_norm(a.double())), rel=1e-6)
    assert total(a.abs()) == pytest.approx(float(a.double().abs().sum()), rel=1e-6)


def test_a_cancelling_sum_keeps_its_small_remainder():
    # the scale test's numerator: Σ sign·Δ, where Δ = 1e-5·ref plus terms that cancel
    n = 4 * BLOCK + 7
    ref = torch.randn(n, generator=torch.Generator().manual_seed(1))
    noise = torch.full((n,), 1.0)
    noise[1::2] = -1.0
    diff = 1e-5 * ref + noise[: n] * 1e-3 * (torch.arange(n) < n - 1)
    found, l1 = along(diff, ref)
    expected = float(torch.sum(torch.sign(ref).double() * diff.double()))
    assert found == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert l1 == pytest.approx(float(ref.double().abs().sum()), rel=1e-6)


def test_reduced_precision_is_summed_in_float32_at_least():
    a = torch.full((8 * BLOCK,), 1.0, dtype=torch.bfloat16)
    assert total(a) == 8 * BLOCK  # a bf16 sum would stop at 256
    assert norm(a) == pytest.approx(math.sqrt(8 * BLOCK))


def test_values_whose_squares_leave_float32s_range_are_measured_right():
    a = torch.full((2 * BLOCK + 3,), 3e30)  # its square overflows float32
    assert norm(a) == pytest.approx(float(torch.linalg.vector_norm(a.double())), rel=1e-6)
