"""python -m goose.bench.pass_cost: a pass timed per part and tree size, and real steps per part."""

from __future__ import annotations

from tiny import tiny_llama

from goose.bench.pass_cost import markdown_table, measure_parts, profile_table, step_profile


def test_every_part_is_timed_at_every_size_and_the_passes_add_up():
    model = tiny_llama(0)
    parts = measure_parts(model, sizes=(1, 4), heads=["full", "int8"], prefix=16, repeats=1)
    for name in ("weights floor", "linears", "linears (stock)", "body", "body (tree)", "head full", "head int8 (tree)"):
        assert set(parts[name]) == {1, 4} and all(seconds > 0 for seconds in parts[name].values()), name
    table = markdown_table(parts)
    body, head = parts["body (tree)"][4], parts["head int8 (tree)"][4]
    row = next(line for line in table.splitlines() if line.startswith("| pass, int8 head (tree) |"))
    assert row.split(" | ")[2] == f"{1000 * (body + head):.1f}"


def test_the_step_profile_splits_real_steps_of_every_method(flat_costs):
    model = tiny_llama(0)
    table = step_profile(model, ["abc abc abc abc", "the cat. the cat. the"], ["autoregressive", "goose"], 12)
    assert table["autoregressive"]["nodes"] == 1 and table["autoregressive"]["tau"] == 1
    assert table["goose"]["tau"] > 1 and table["goose"]["nodes"] > 1
    for row in table.values():
        assert all(row[part] >= 0 for part in ("forward", "head and walk", "commit", "draft", "prefill per prompt"))
    lines = profile_table(table).splitlines()
    assert lines[0].startswith("| method | forward |") and len(lines) == 2 + 2
