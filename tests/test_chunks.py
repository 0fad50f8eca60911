"""ChunkedRows answers a screen's questions (top-k, entries over a threshold, extremes) exactly as a full read."""

import pytest
import torch

from goose.chunks import ChunkedRows


def _rows(n: int, width: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, width, generator=generator) * 3).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n, width, chunk", [(1, 4096, 256), (5, 50257, 1024), (16, 262144, 1024), (3, 700, 1024)])
@pytest.mark.parametrize("k", [1, 8, 40])
def test_top_k_equals_torch_topk(dtype, n, width, chunk, k):
    rows = _rows(n, width, dtype, seed=n * 7 + k)
    top = ChunkedRows(rows, chunk=chunk).top(k)
    expected = torch.topk(rows, min(k, width), dim=1)
    assert torch.equal(top.values, expected.values)
    # the columns hold those values (bfloat16 ties may pick another column of the same value)
    assert torch.equal(rows.gather(1, top.indices), expected.values)
    assert top.indices.max() < width


def test_top_k_when_the_largest_entries_share_one_chunk():
    # The top 8 all in chunk 3: every other chunk's maximum is smaller, so only one chunk holds them.
    rows = torch.zeros(2, 8192)
    rows[0, 3 * 1024 : 3 * 1024 + 8] = torch.arange(10.0, 18.0)
    rows[1, -8:] = torch.arange(-1.0, -9.0, -1.0) + 100
    top = ChunkedRows(rows, chunk=1024).top(8)
    assert top.values[0].tolist() == list(range(17, 9, -1))
    assert sorted(top.indices[0].tolist()) == list(range(3 * 1024, 3 * 1024 + 8))
    assert sorted(top.indices[1].tolist()) == list(range(8192 - 8, 8192))


@pytest.mark.parametrize("width", [8192, 50257])
def test_entries_at_least_a_threshold_are_nonzero_of_the_mask(width):
    rows = _rows(6, width, torch.float32, seed=width)
    threshold = torch.tensor([9.0, 10.0, 100.0, 8.5, -torch.inf, 11.0])
    got = ChunkedRows(rows).at_least(threshold)
    expected = (rows >= threshold[:, None]).nonzero(as_tuple=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])  # row-major, as nonzero


def test_an_infinite_threshold_never_reaches_the_padding():
    rows = _rows(2, 1500, torch.float32, seed=1)
    got = ChunkedRows(rows, chunk=1024).at_least(torch.full((2,), -torch.inf))
    assert got[1].max() == 1499 and got[0].numel() == 2 * 1500


@pytest.mark.parametrize("width", [4096, 5000])
def test_extremes(width):
    rows = _rows(4, width, torch.bfloat16, seed=3)
    rows[2] = -rows[2].abs() - 1  # a row whose largest magnitude is its minimum
    chunked = ChunkedRows(rows, chunk=1024)
    assert torch.equal(chunked.row_max(), rows.amax(1))
    assert torch.equal(chunked.abs_max(), rows.abs().amax(1))
