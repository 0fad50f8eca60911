"""The body's prepacked oneDNN linears: same float32 products, batch-invariant rows, only where the Verifier runs."""

from __future__ import annotations

import threading

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.costs import cost_key
from goose.packed import body_linears, pack_linears, packed_linears
from goose.verify import Verifier


def _linear(rows: int, columns: int, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(columns, rows, bias=False)


def _packed(linear: torch.nn.Linear) -> torch.nn.Module:
    body = torch.nn.Sequential(linear)
    assert pack_linears(body)
    return body


@pytest.mark.parametrize("shape", [(2048, 640), (640, 2048), (37, 29)])
def test_packed_rows_do_not_depend_on_the_batch(shape):
    """Each row comes out bitwise the same alone or among others (tree rows round as the AR step's row), and
    the products are the float32 products."""
    linear = _linear(*shape)
    body = _packed(linear)
    x = torch.randn(130, shape[1])
    with torch.inference_mode(), packed_linears():
        alone = torch.cat([body(x[i:i + 1]) for i in range(len(x))])
        for batch in (2, 3, 9, 16, 33, 130):
            assert torch.equal(body(x[:batch]), alone[:batch]), f"row results changed with {batch} rows"
        assert torch.equal(body(x[None, :9])[0], alone[:9]), "3-D inputs (batch, rows, features) too"
    stock = torch.nn.functional.linear(x, linear.weight).detach()
    assert torch.allclose(alone, stock, rtol=1e-5, atol=1e-5 * float(stock.abs().max()))


def test_packing_applies_only_inside_the_context_and_this_thread():
    linear = _linear(256, 64)
    body = _packed(linear)
    x = torch.randn(5, 64)
    stock = torch.nn.functional.linear(x, linear.weight)
    outside: list[torch.Tensor] = []
    with torch.inference_mode():
        assert torch.equal(body(x), stock), "outside packed_linears() the module is stock nn.Linear"
        with packed_linears():
            thread = threading.Thread(target=lambda: outside.append(body(x)))
            thread.start()
            thread.join()
            packed = body(x)
    assert torch.equal(outside[0], stock), "another thread (another user of the model) stays stock"
    oneDNN = torch.ops.mkldnn._linear_pointwise(x, linear._goose_packed.current(), None, "none", [], "")
    assert torch.equal(packed, oneDNN), "inside it, the packed kernel runs"


def test_a_changed_weight_is_repacked():
    linear = _linear(64, 32)
    body = _packed(linear)
    x = torch.randn(3, 32)
    with torch.no_grad():
        linear.weight.mul_(2)
    with torch.inference_mode(), packed_linears():
        assert torch.allclose(body(x), torch.nn.functional.linear(x, linear.weight), atol=1e-5)
    linear.weight = torch.nn.Parameter(torch.randn(64, 32))
    with torch.inference_mode(), packed_linears():
        assert torch.allclose(body(x), torch.nn.functional.linear(x, linear.weight), atol=1e-5)


def test_only_plain_float32_linears_are_packed():
    assert not pack_linears(torch.nn.Sequential(torch.nn.Linear(8, 8).to(torch.bfloat16)))
    assert not pack_linears(torch.nn.Sequential(torch.nn.ReLU()))


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3])
def test_the_verifier_runs_the_body_packed_and_agrees_with_the_stock_body(build):
    model = build(3)
    tokens = list(range(4, 40))
    stock = Verifier(model.model)
    stock.packed = False
    expected = stock.forward_chain(tokens)
    verifier = Verifier(model.model)
    assert verifier.packed and body_linears(model.model) == "packed"
    assert torch.allclose(verifier.forward_chain(tokens), expected, atol=1e-4)
    assert "linears=packed" in cost_key(model, 2, "full"), "costs are measured and cached per kind of body"


def test_packing_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("GOOSE_PACKED_LINEARS", "0")
    model = tiny_llama(4)
    assert not Verifier(model.model).packed and body_linears(model.model) == "stock"
    run = goose.generate(model, "abcabcabc", "goose", 8, budget=6)
    monkeypatch.setenv("GOOSE_PACKED_LINEARS", "1")
    assert goose.generate(tiny_llama(4), "abcabcabc", "goose", 8, budget=6).tokens == run.tokens
