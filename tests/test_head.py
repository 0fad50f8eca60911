"""The screened LM heads (bf16 and int8) return exactly the float32 argmax, for any hidden state."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.heads.factory import head_for, heads_here, known_head, make_head
from goose.heads.protocol import LMHead, SampledRows
from goose.heads.routing import RoutedHead, parse_routed
from goose.heads.rows import ScreenedRows
from goose.heads.screens import FullHead, Int8ScreenedHead, ScreenedHead, block_hadamard

SCREENS = [ScreenedHead, Int8ScreenedHead]


def _check_same_argmax(lm_head: torch.nn.Linear, hidden: torch.Tensor, screen=ScreenedHead) -> ScreenedHead:
    screened = screen(lm_head, None)
    full_argmax, full_top = FullHead(lm_head, None).greedy(hidden, 5)
    argmax, top = screened.greedy(hidden, 5)
    assert torch.equal(argmax, full_argmax)
    rows = screened.target_rows(hidden)  # the greedy walk's rows: each row's argmax only when asked
    assert [rows.argmax(i) for i in range(hidden.shape[0])] == full_argmax.tolist()
    assert top.indices.shape == full_top.indices.shape == (hidden.shape[0], 5)
    return screened


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("seed", range(5))
def test_screened_argmax_equals_full_argmax_on_random_heads(seed, screen):
    generator = torch.Generator().manual_seed(seed)
    width = (64, 30, 33, 96, 64)[seed]  # odd and non-power-of-two widths take smaller Hadamard blocks
    lm_head = torch.nn.Linear(width, 5000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(5000, width, generator=generator) * 0.05)
    hidden = torch.randn(40, width, generator=generator) * (1 + seed)
    hidden[::7, seed] *= 30  # an outlier coordinate, as real hidden states have
    _check_same_argmax(lm_head, hidden, screen)


@pytest.mark.parametrize("screen", SCREENS)
def test_near_ties_are_recomputed_in_float32(screen):
    """Two rows a hair apart: bf16 cannot tell them apart, the screen must still pick the float32 winner."""
    weight = torch.randn(1000, 32) * 0.1
    weight[7] = weight[3] + 1e-4  # row 7 beats row 3 by far less than bf16 resolution
    hidden = weight[3].clone() * 50 + 1e-3
    lm_head = torch.nn.Linear(32, 1000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(weight)
    screened = _check_same_argmax(lm_head, hidden[None], screen)
    assert screened.screened_rows >= 2


@pytest.mark.parametrize("screen", SCREENS)
def test_flat_screen_scans_the_whole_row_in_float32(screen):
    """Fifty rows within bf16 resolution of each other overflow the screen's top list: the whole row is scanned."""
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(2000, 32, generator=generator) * 0.05
    base = torch.randn(32, generator=generator)
    weight[100:150] = base + torch.randn(50, 32, generator=generator) * 1e-5
    lm_head = torch.nn.Linear(32, 2000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(weight)
    hidden = torch.stack([base * 20, torch.randn(32, generator=generator)])
    screened = _check_same_argmax(lm_head, hidden, screen)
    assert screened.screened_rows >= 50


@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("cap", [None, 30.0])
def test_target_rows_are_exact_where_the_walk_asks(screen, cap):
    """Through a screen, sampling's rows are the full head's: whole rows, the top-k with its ties, and
    Gumbel-max draws (the same noise gives the same token), the adjacency table's top-k close to the truth."""
    generator = torch.Generator().manual_seed(1)
    lm_head = torch.nn.Linear(64, 3000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(3000, 64, generator=generator) * 0.05)
        lm_head.weight[2000] = lm_head.weight[1000]  # a tie: both or neither belong to a top-k
    hidden = torch.randn(6, 64, generator=generator) * 3
    hidden[4] = lm_head.weight[1000].detach() * 400
    truth = FullHead(lm_head, cap).target_rows(hidden)
    rows = screen(lm_head, cap).target_rows(hidden)
    for i in (0, 5, 2, 4):
        assert torch.allclose(rows.logits(i), truth.logits(i), rtol=0, atol=1e-5)
        for k in (1, 3, 40):
            (values, ids), (true_values, true_ids) = rows.top(i, k), truth.top(i, k)
            assert torch.equal(ids.sort().values, true_ids.sort().values)
            assert torch.allclose(values[ids.argsort()], true_values[true_ids.argsort()], atol=1e-5)
        for seed in range(20):
            for temperature in (0.3, 1.0, 3.0):
                drawn = rows.draw(i, temperature, torch.Generator().manual_seed(seed))
                assert drawn == truth.draw(i, temperature, torch.Generator().manual_seed(seed))
    assert set(rows.top(4, 1)[1].tolist()) == {1000, 2000}
    top = rows.adjacency_top(5)
    assert top.indices.shape == (6, 5)
    assert torch.allclose(top.values, torch.stack([truth.logits(i) for i in range(6)]).gather(1, top.indices),
                          rtol=0.01, atol=0.05), "the screen is close to the truth"


@pytest.mark.parametrize("warp", [{"temperature": 0.8}, {"temperature": 0.8, "top_k": 5}])
def test_sampling_computes_float32_values_only_for_the_rows_the_walk_visits(monkeypatch, warp):
    """Temperature alone: a Gumbel draw through the screen; top-k: the exact top-k. Neither computes a
    whole float32 row, and each visited row (the path and the bonus's row) gets one float32 look."""
    model = tiny_llama(0)
    looked: list[int] = []
    original = ScreenedRows._exact

    def counting(self, i, vocab):
        looked.append(i)
        return original(self, i, vocab)

    def whole_row(self, hidden):
        raise AssertionError("a whole float32 row was computed")

    monkeypatch.setattr(ScreenedRows, "_exact", counting)
    monkeypatch.setattr(ScreenedHead, "logits", whole_row)
    run = goose.generate(model, "abcabcabcabc", "goose", 24, budget=12, seed=0, head="screened", **warp)
    assert len(run.steps) > 1 and max(len(step.nodes) for step in run.steps) > 2
    visited = 1 + sum(len(step.accepted) + 1 for step in run.steps)  # prefill's last row, then each path
    assert len(looked) == visited


def test_top_p_alone_computes_the_visited_rows_whole():
    model = tiny_llama(0)
    run = goose.generate(model, "abcabcabcabc", "goose", 24, budget=12, seed=0, head="screened",
                         temperature=0.8, top_p=0.9)
    assert run.steps and all(n.accept_prob is not None for s in run.steps for n in s.nodes
                             if n.status in ("accepted", "rejected"))


def test_heads_are_built_once_per_model_and_kind():
    model = tiny_llama(0)
    assert head_for(model, "screened") is head_for(model, "screened")
    assert type(head_for(model, "full")) is FullHead
    goose.generate(model, "hello", "goose", 4, head="screened")  # not "auto": its timing drops the slower heads
    goose.generate(model, "hello", "autoregressive", 4, head="screened")
    assert set(model.cache.heads) == {"screened", "full"}


def test_make_head_uses_the_screen_only_where_it_is_exact():
    assert isinstance(make_head(tiny_llama(0).model, "screened"), ScreenedHead)
    assert isinstance(make_head(tiny_llama(0).model, "int8"), Int8ScreenedHead)
    assert type(make_head(tiny_llama(0).model, "full")) is FullHead
    capped = tiny_gemma3(0)
    capped.model.config.final_logit_softcapping = 30.0
    assert isinstance(make_head(capped.model, "screened"), ScreenedHead)
    assert make_head(capped.model, "screened").cap == 30.0
    with pytest.raises(ValueError, match="unknown head 'half'"):
        make_head(capped.model, "half")


@pytest.mark.slow
@pytest.mark.parametrize("screen", SCREENS)
def test_screened_argmax_on_the_real_gemma_head(gemma, screen):
    ids = torch.tensor([gemma.encode("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the")])
    with torch.no_grad():
        hidden = gemma.model.get_decoder()(input_ids=ids).last_hidden_state[0]
    screened = _check_same_argmax(gemma.model.lm_head, hidden, screen)
    assert screened.screened_rows < 1000 * hidden.shape[0], "the screen should leave only a few rows to recompute"


def test_auto_budget_costs_are_measured_with_the_runs_head(monkeypatch, tmp_path):
    import goose.costs

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    measured = []
    monkeypatch.setattr(goose.costs, "measure_costs",
                        lambda model, head="screened": measured.append(head) or {2: 1.0, 8: 2.0})
    model = tiny_llama(0)
    goose.generate(model, "abcabc", "goose", 4, head="full")
    goose.generate(model, "abcabc", "goose", 4, head="screened")
    goose.generate(model, "abcabc", "goose", 4, head="full")
    assert measured == ["full", "screened"]


@pytest.mark.parametrize("faster", ["screened", "full", "int8+screened@8"])
def test_the_auto_head_is_the_faster_exact_head_measured_once(monkeypatch, tmp_path, faster):
    """auto times the exact heads once per model and machine and keeps the faster (or a routed pair): without
    fast bfloat16 (a plain AVX2 CPU) the screen costs more than the float32 head it saves. The choice is kept
    on disk, so another process (here: another load of the same model) reads it instead of timing again."""
    import goose.costs

    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    timings = []

    def timed(goose_model, rows=16, repeats=3):
        timings.append(goose_model.name)
        return faster

    monkeypatch.setattr(goose.costs, "_faster_head", timed)
    model = tiny_llama(0)
    runs = [goose.generate(model, "abcabc", "goose", 4, budget=4) for _ in range(2)]
    assert [run.head for run in runs] == [faster, faster] and timings == [model.name]
    assert goose.generate(model, "abcabc", "goose", 4, budget=4, head="full").head == "full"
    reloaded = tiny_llama(0)
    assert reloaded is not model and goose.costs.choose_head(reloaded) == faster and timings == [model.name]
    monkeypatch.undo()
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))
    assert known_head(goose.costs.choose_head(tiny_llama(1)))  # the real measurement runs too


@pytest.mark.parametrize("seed", range(4))
def test_the_int8_error_bound_holds(seed):
    """Every int8 logit lies within the head's bound of its float64 value: what makes the argmax exact.
    Fails if fbgemm's quantisation of the levels were not the identity, or the bound forgot a term."""
    generator = torch.Generator().manual_seed(seed)
    lm_head = torch.nn.Linear(128, 4000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(4000, 128, generator=generator) * 0.05)
        lm_head.weight[:50] *= 20  # rows of very different norms share one bound
    hidden = torch.randn(25, 128, generator=generator) * 10 ** (seed - 1)
    hidden[:, 3] *= 40
    head = Int8ScreenedHead(lm_head, None)
    approx, bound = head.screen(hidden)
    truth = hidden.double() @ lm_head.weight.detach().double().T
    error = (approx.double() - truth).abs().amax(1)
    assert (error <= bound.double()).all()
    assert (bound.double() < 20 * error).all(), "the bound should be a bound, not a blanket"


def test_the_hadamard_rotation_is_orthogonal_and_keeps_logits():
    for width, block in ((640, 128), (96, 32), (30, 2), (33, 1)):
        matrix, size = block_hadamard(width)
        assert size == block and torch.equal(matrix @ matrix.T, block * torch.eye(block))
    lm_head = torch.nn.Linear(96, 300, bias=False)
    head = Int8ScreenedHead(lm_head, None)
    hidden = torch.randn(5, 96)
    assert torch.allclose(head.rotate(hidden) @ head.rotate(lm_head.weight.detach()).T,
                          hidden @ lm_head.weight.detach().T, atol=1e-5)


def test_a_flat_int8_screen_falls_back_to_one_float32_pass(monkeypatch):
    """A row with more candidates than Int8ScreenedHead.FLAT is computed whole in float32, still exactly."""
    monkeypatch.setattr(Int8ScreenedHead, "FLAT", 10)
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(3000, 32, generator=generator) * 0.05
    base = torch.randn(32, generator=generator) * 0.05
    weight[100:150] = base + torch.randn(50, 32, generator=generator) * 1e-7  # fifty near-identical rows
    lm_head = torch.nn.Linear(32, 3000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(weight)
    hidden = torch.stack([base * 400, weight[7] * 400])
    screened = _check_same_argmax(lm_head, hidden, Int8ScreenedHead)
    assert 3000 <= screened.screened_rows < 2 * 3000, "only the flat row is computed whole"


def test_heads_here_are_the_heads_really_built():
    """gpu_check and auto only time heads that exist on the model's device: a head that would fall back to
    the full one is not reported under another name."""
    model = tiny_llama(0)
    assert heads_here(model) == ["int8", "screened", "full"]
    model.model.get_output_embeddings().to(torch.bfloat16)
    assert heads_here(model) == ["full"]


def test_flat_target_rows_fall_back_to_the_whole_row(monkeypatch):
    """Past Screen.FLAT candidates a draw or a top-k computes the whole float32 row: still the same token."""
    monkeypatch.setattr(Int8ScreenedHead, "FLAT", 0)
    generator = torch.Generator().manual_seed(2)
    lm_head = torch.nn.Linear(32, 500, bias=False)
    hidden = torch.randn(3, 32, generator=generator)
    truth, rows = FullHead(lm_head, None).target_rows(hidden), Int8ScreenedHead(lm_head, None).target_rows(hidden)
    for seed in range(10):
        assert rows.draw(1, 0.7, torch.Generator().manual_seed(seed)) == truth.draw(1, 0.7,
                                                                                   torch.Generator().manual_seed(seed))
    assert torch.equal(rows.top(2, 4)[1].sort().values, truth.top(2, 4)[1].sort().values)


def test_the_fastest_route_routes_only_where_a_pair_wins():
    """auto's pick from the timings per call size: the head that wins everywhere stays alone (ties too); where
    one wins small calls and another big ones, the pair with the threshold between them."""
    from goose.costs import fastest_route

    sizes = (1, 2, 4, 8, 16, 32)
    int8 = dict(zip(sizes, (16, 19, 23, 32, 47, 95)))
    bf16 = dict(zip(sizes, (38, 37, 39, 30, 36, 61)))
    full = dict(zip(sizes, (37, 38, 73, 121, 110, 134)))
    assert fastest_route({"int8": int8, "screened": bf16, "full": full}) == "int8+screened@8"
    assert fastest_route({"int8": int8, "full": full}) == "int8"
    assert fastest_route({"screened": bf16, "full": full}) == "full+screened@2"
    assert fastest_route({"int8": int8, "screened": dict(int8)}) == "int8"


def test_a_routed_head_answers_each_call_from_its_own_head_and_stays_exact():
    """int8+screened@4: calls of fewer than 4 rows go to the int8 screen, the rest to the bf16 one; both give the
    float32 argmax; an unknown or degenerate pair is refused."""
    model = tiny_llama(0)
    head = head_for(model, "int8+screened@4")
    assert isinstance(head, RoutedHead) and (head.small, head.large) == (head_for(model, "int8"),
                                                                         head_for(model, "screened"))
    weight = model.model.get_output_embeddings().weight
    hidden = torch.randn(6, weight.shape[1], generator=torch.Generator().manual_seed(0))
    full = head_for(model, "full")
    for rows in (1, 3, 4, 6):
        before = (head.small.screened_rows, head.large.screened_rows)
        assert torch.equal(head.greedy(hidden[:rows])[0], full.greedy(hidden[:rows])[0])
        answered = head.small if rows < 4 else head.large
        other = head.large if rows < 4 else head.small
        assert answered.screened_rows > before[answered is head.large] and \
            other.screened_rows == before[other is head.large]
    assert parse_routed("int8+screened@4") == ("int8", "screened", 4)
    for bad in ("int8+int8@4", "int8+screened@1", "int8+bogus@4", "int8+screened", "bogus"):
        assert not known_head(bad)
    with pytest.raises(ValueError, match="unknown head"):
        goose.generate(model, "abc", head="int8+int8@4")


def test_every_head_kind_answers_the_one_interface():
    """The full head, both screens and a routed pair are LMHeads whose rows are SampledRows: what the walk and
    the measuring code call, and nothing more."""
    model = tiny_llama(0)
    vocab, width = model.model.get_output_embeddings().weight.shape
    hidden = torch.randn(3, width, generator=torch.Generator().manual_seed(0))
    for kind in ("full", "screened", "int8", "int8+screened@2"):
        head = head_for(model, kind)
        assert isinstance(head, LMHead) and isinstance(head.target_rows(hidden), SampledRows), kind
        assert head.vocab_size == head.target_rows(hidden).vocab_size == vocab, kind


@pytest.mark.parametrize("cap", [None, 5.0])
@pytest.mark.parametrize("make_model", [tiny_llama, tiny_gemma3])
def test_top_among_ranks_only_the_given_tokens_in_float32(make_model, cap):
    """A prefill's prompt rows are ranked among a few tokens: every head kind gives the float32 top-k of exactly
    those tokens (soft-capped as the model's logits: the full head's), by vocabulary id; None ranks the whole
    vocabulary."""
    lm_head = make_model(0).model.get_output_embeddings()
    vocab, width = lm_head.weight.shape
    hidden = torch.randn(5, width, generator=torch.Generator().manual_seed(1)) * 4
    vocabulary = torch.arange(3, vocab, 3)
    expected = torch.topk(FullHead(lm_head, cap).logits(hidden)[:, vocabulary], 4, dim=1)
    heads = {"full": FullHead(lm_head, cap), "screened": ScreenedHead(lm_head, cap),
             "int8": Int8ScreenedHead(lm_head, cap)}
    heads["int8+screened@2"] = RoutedHead(heads["int8"], heads["screened"], 2)
    for kind, head in heads.items():
        top = head.top_among(hidden, vocabulary, 4)
        assert torch.equal(top.indices, vocabulary[expected.indices]), kind
        torch.testing.assert_close(top.values, expected.values)
        assert set(top.indices.flatten().tolist()) <= set(vocabulary.tolist()), kind
        assert head.top_among(hidden, vocabulary[:2], 4).indices.shape == (5, 2), kind  # k beyond the tokens given
        whole = head.top_among(hidden, None, 4)
        assert torch.equal(whole.indices, head.top(hidden, 4).indices), kind


def test_the_head_modules_import_one_way():
    """protocol, rows, screens, routing, factory: each imports only the ones before it, never a higher one."""
    from test_imports import import_graph

    order = ["goose.heads.protocol", "goose.heads.rows", "goose.heads.screens", "goose.heads.routing",
             "goose.heads.factory"]
    graph = import_graph()
    for i, module in enumerate(order):
        assert {m for m in graph[module] if m.startswith("goose.heads")} <= set(order[:i]), module


def test_the_greedy_walk_computes_the_argmax_only_where_it_goes():
    """A rejected branch's row feeds only the adjacency table: its target stays None (not evaluated), and the
    visited nodes' targets are the full head's argmax."""
    from goose.tree import DraftTree
    from goose.walk import GreedyWalker

    generator = torch.Generator().manual_seed(2)
    lm_head = torch.nn.Linear(32, 500, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(500, 32, generator=generator) * 0.1)
    hidden = torch.randn(5, 32, generator=generator) * 4
    truth = FullHead(lm_head, None).greedy(hidden)[0].tolist()
    tree = DraftTree.rooted_at(0)
    accepted = tree.add(truth[0], 0, "spine")  # the root's argmax: accepted
    tree.add((truth[0] + 1) % 500, 0, "branch")  # a sibling the walk rejects
    tree.add((truth[accepted] + 1) % 500, accepted, "spine")  # wrong: the walk stops at `accepted`
    tree.add(7, 2, "branch")  # under the rejected sibling: never visited
    for screen in (*SCREENS, FullHead):
        verification, _ = GreedyWalker(screen(lm_head, None)).walk(tree, hidden, 3)
        assert verification.accepted == [accepted] and verification.bonus == truth[accepted]
        assert verification.targets == [truth[0], truth[1], None, None, None]
