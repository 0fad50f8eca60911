"""Draw one speculation step's draft tree with pyvis, as a self-contained page that works offline.

Nodes are coloured by where they came from (root, spine = context match,
branch = adjacency table, suffix = SuffixDecoding's suffix trees); the accepted path has thick edges and outlined
nodes; rejected and unvisited nodes are faded; the bonus token hangs off the
last accepted node. The page inlines vis-network and links nothing remote, so
it draws on a laptop without network; it goes in an iframe because gr.HTML
does not run <script> tags. A tree is shrunk to fit its pane as long as its labels stay legible
(MIN_SCALE); a longer one keeps that scale on a canvas as large as it needs, inside a scrolling page, so
labels of a 100-node spine stay legible.
"""

from __future__ import annotations

import html
import json
import re

from pyvis.network import Network

from goose.charts import SOURCE_COLOURS
from goose.optimal import RateTree
from goose.trace import StepRecord
from goose.tree import BRANCH, ROOT, SPINE, SUFFIX

BONUS = "bonus"  # the bonus token's kind: chosen by the target model after the accepted path, never drafted
BONUS_COLOUR = "#10b981"
ACCEPTED_BORDER = "#111827"
FADED_OPACITY = 0.28
SOURCE_NAMES = {ROOT: "root (anchor)", SPINE: "spine (context match)", BRANCH: "branch (adjacency table)",
                SUFFIX: "suffix (SuffixDecoding's suffix trees)"}

_REMOTE_TAG = re.compile(
    r"<script[^>]*\bsrc\s*=\s*[\"']https?://[^>]*>\s*</script>|<link[^>]*\bhref\s*=\s*[\"']https?://[^>]*/?>",
    re.IGNORECASE | re.DOTALL)
_HEADINGS = re.compile(r"<center>\s*<h1>\s*</h1>\s*</center>", re.IGNORECASE)
LABEL_PX = 14  # vis-network's label font size at scale 1
MIN_SCALE = 0.75  # the smallest a tree is shrunk to fit its pane: labels stay 10.5 px high, longer trees scroll
# After vis-network lays the tree out: shrink it to fit the pane when that keeps labels legible (down to
# MIN_SCALE), else grow the canvas to the tree's extent at MIN_SCALE and scroll; root top left first. The canvas
# leaves room at the bottom for the sideways scrollbar, so a long tree shows it is cut.
_ACTUAL_SIZE = """<script>(function () {
  const container = document.getElementById('mynetwork');
  const ids = network.body.data.nodes.getIds();
  const boxes = ids.map(id => network.getBoundingBox(id));
  const left = Math.min(...boxes.map(b => b.left)), right = Math.max(...boxes.map(b => b.right));
  const top = Math.min(...boxes.map(b => b.top)), bottom = Math.max(...boxes.map(b => b.bottom));
  const pad = 30;
  const viewWidth = document.documentElement.clientWidth - 2;
  const viewHeight = Math.max(200, window.innerHeight - container.getBoundingClientRect().top - 20);
  const fit = Math.min(1, (viewWidth - 2 * pad) / (right - left), (viewHeight - 2 * pad) / (bottom - top));
  const scale = Math.max(MIN_SCALE, fit);
  const width = Math.max(viewWidth, (right - left) * scale + 2 * pad);
  const height = Math.max(viewHeight, (bottom - top) * scale + 2 * pad);
  container.style.width = width + 'px';
  container.style.height = height + 'px';
  network.setSize(width + 'px', height + 'px');
  network.moveTo({position: {x: left - pad / scale + width / (2 * scale), y: (top + bottom) / 2}, scale: scale});
})();</script>""".replace("MIN_SCALE", str(MIN_SCALE))


def visible_text(text: str) -> str:
    """A token's text with its whitespace made visible (a space-only token would be an empty label)."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _fade(hex_colour: str, opacity: float) -> str:
    red, green, blue = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{opacity})"


def _token_texts(step: StepRecord) -> dict[int, str]:
    """Texts of the token ids this step knows about, to name what the target model predicted."""
    texts = {node.token: node.text for node in step.nodes}
    texts[step.bonus_token] = step.bonus_text
    return texts


def _tooltip(step: StepRecord, index: int, texts: dict[int, str]) -> str:
    node = step.nodes[index]
    predicted = "not evaluated" if node.target is None else repr(texts.get(node.target, f"token #{node.target}"))
    lines = [f"#{index} {node.text!r} (token {node.token})", f"source: {node.source}", f"depth: {node.depth}",
             f"score: {node.score:.3f}", f"status: {node.status}", f"target model chose next: {predicted}"]
    if node.accept_prob is not None:
        lines.append(f"accept probability: {node.accept_prob:.3f}")
    if node.reason:
        lines.append(f"reason: {node.reason}")
    return "\n".join(lines)


def build_network(step: StepRecord, height: str = "560px") -> Network:
    """The pyvis network of one step: hierarchical, root on the left, accepted path emphasised."""
    net = Network(height=height, width="100%", directed=False, cdn_resources="in_line")
    on_path = set(step.path)
    texts = _token_texts(step)
    for index, node in enumerate(step.nodes):
        colour = SOURCE_COLOURS.get(node.source, "#9ca3af")
        accepted = index in on_path
        background = colour if accepted or node.source == ROOT else _fade(colour, FADED_OPACITY)
        net.add_node(index, label=visible_text(node.text), title=_tooltip(step, index, texts), level=node.depth,
                     shape="box", borderWidth=4 if accepted else 1,
                     color={"background": background, "border": ACCEPTED_BORDER if accepted else colour},
                     font={"color": "#111827" if accepted else "#6b7280"}, source=node.source,
                     status=node.status)
    for index, node in enumerate(step.nodes[1:], start=1):
        accepted = index in on_path
        net.add_edge(node.parent, index, width=6 if accepted else 1,
                     color=ACCEPTED_BORDER if accepted else _fade("#6b7280", 0.5))
    last = step.path[-1]
    bonus = len(step.nodes)
    net.add_node(bonus, label=visible_text(step.bonus_text), shape="ellipse", borderWidth=4, source=BONUS,
                 status=BONUS,
                 level=step.nodes[last].depth + 1,
                 title=f"bonus token {step.bonus_text!r} (token {step.bonus_token})\n"
                       "chosen by the target model after the last accepted node; always committed",
                 color={"background": BONUS_COLOUR, "border": ACCEPTED_BORDER}, font={"color": "#111827"})
    net.add_edge(last, bonus, width=6, dashes=True, color=BONUS_COLOUR)
    return _laid_out(net)


def _laid_out(net: Network) -> Network:
    """Every tree's layout: hierarchical, root on the left, no physics, hover for details."""
    net.set_options(json.dumps({
        "layout": {"hierarchical": {"enabled": True, "direction": "LR", "sortMethod": "directed",
                                    "levelSeparation": 130, "nodeSpacing": 30, "treeSpacing": 30}},
        "physics": {"enabled": False},
        # no zoom or drag: the page scrolls, and hovering shows each node's details
        "interaction": {"hover": True, "tooltipDelay": 80, "navigationButtons": False, "zoomView": False,
                        "dragView": False},
        "nodes": {"font": {"size": LABEL_PX}},
        "edges": {"arrows": {"to": {"enabled": False}}, "smooth": False},
    }))
    return net


def build_model_network(tree: RateTree, height: str = "560px") -> Network:
    """The pyvis network of a tree of the rate model (goose.optimal): each node coloured by its source, as
    opaque as it is likely to be reached and labelled with that chance."""
    net = Network(height=height, width="100%", directed=False, cdn_resources="in_line")
    depths = tree.depths
    for index, (source, rank, reach) in enumerate(zip(tree.sources, tree.ranks, tree.reach, strict=True)):
        colour = SOURCE_COLOURS.get(source, "#9ca3af")
        kind = "root (anchor)" if source == ROOT else f"branch, rank {rank}" if source == BRANCH else "spine"
        net.add_node(index, label="root" if source == ROOT else f"{reach:.0%}", level=depths[index], shape="box",
                     title=f"#{index} {kind}\ndepth: {depths[index]}\nreached (accepted) with chance {reach:.3f}",
                     color={"background": _fade(colour, FADED_OPACITY + (1 - FADED_OPACITY) * reach),
                            "border": colour},
                     font={"color": "#111827"}, source=source, reach=reach)
    for index, parent in enumerate(tree.parents[1:], start=1):
        net.add_edge(parent, index, width=1 + 5 * tree.reach[index], color=_fade("#6b7280", 0.6))
    return _laid_out(net)


def legend_html() -> str:
    """The colour key, shared by the tree page and the coloured text."""
    def chip(colour: str, label: str, border: str = "transparent", round_: bool = False) -> str:
        radius = "50%" if round_ else "3px"
        return (f'<span style="display:inline-flex;align-items:center;margin-right:14px">'
                f'<span style="width:14px;height:14px;border-radius:{radius};background:{colour};'
                f'border:3px solid {border};margin-right:5px"></span>{html.escape(label)}</span>')

    chips = [chip(colour, SOURCE_NAMES[source]) for source, colour in SOURCE_COLOURS.items()]
    chips.append(chip(BONUS_COLOUR, "bonus token (target model)", ACCEPTED_BORDER, round_=True))
    chips.append(chip("#ffffff", "accepted path: outlined, thick edges", ACCEPTED_BORDER))
    chips.append(chip(_fade("#3b82f6", FADED_OPACITY), "rejected / unvisited: faded"))
    return f'<div class="goose-legend" style="font:13px sans-serif;padding:4px 2px">{"".join(chips)}</div>'


def strip_remote_resources(page: str) -> str:
    """Remove pyvis's CDN <script src> / <link href> tags (bootstrap, tom-select): the page must stand alone."""
    return _REMOTE_TAG.sub("", page)


def _page(net: Network, header: str) -> str:
    """A whole offline HTML page drawing `net`, `header` above it, sized as every tree is (_ACTUAL_SIZE)."""
    page = _HEADINGS.sub("", strip_remote_resources(net.generate_html()))
    style = "<style>.vis-tooltip{white-space:pre;font:12px monospace !important}body{margin:0}</style>"
    page = page.replace("<body>", f"<body>{style}{header}", 1)
    return page.replace("</body>", f"{_ACTUAL_SIZE}</body>", 1)


def tree_page(step: StepRecord, height: str = "560px") -> str:
    """A whole offline HTML page drawing the step's tree, with a legend and a one-line summary."""
    accepted = "".join(step.nodes[i].text for i in step.accepted)
    summary = (f'<div style="font:13px sans-serif;padding:2px">Step {step.index}: {len(step.nodes)} nodes '
               f'(budget {step.budget}), accepted {step.accepted_length} '
               f'{html.escape(repr(accepted))} + bonus {html.escape(repr(step.bonus_text))}</div>')
    return _page(build_network(step, height), legend_html() + summary)


def model_tree_iframe(tree: RateTree, title: str, height: int = 460) -> str:
    """A tree of the rate model in an <iframe srcdoc>, headed by its title, size and expected accepted length."""
    summary = (f'<div style="font:13px sans-serif;padding:2px"><b>{html.escape(title)}</b>: {len(tree)} nodes, '
               f'expected accepted <b class="why-expected">{tree.expected_accepted:.2f}</b> tokens per step</div>')
    page = _page(build_model_network(tree, f"{height - 40}px"), summary)
    return (f'<iframe class="goose-tree" title="{html.escape(title, quote=True)}" '
            f'style="width:100%;height:{height}px;border:1px solid #e5e7eb;border-radius:6px" '
            f'srcdoc="{html.escape(page, quote=True)}"></iframe>')


def tree_iframe(step: StepRecord | None, height: int = 640) -> str:
    """The tree page inside an <iframe srcdoc> (escaped), ready for gr.HTML; a hint when there is no step."""
    if step is None:
        return ('<div class="goose-tree-empty" style="padding:24px;color:#6b7280">'
                'Run a prompt or load a trace to see its speculation trees.</div>')
    page = tree_page(step, f"{height - 70}px")
    return (f'<iframe class="goose-tree" title="speculation tree of step {step.index}" '
            f'style="width:100%;height:{height}px;border:1px solid #e5e7eb;border-radius:6px" '
            f'srcdoc="{html.escape(page, quote=True)}"></iframe>')
