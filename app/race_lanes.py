"""Replay a race side by side at its measured pace: one lane per method, text growing token by token.

Each lane shows the method's text coloured by where each token came from, a
clock, a token counter and a bar towards the finish; the method that finished
first in the measurement crosses first. The page is plain HTML, CSS and JS with
no network, placed in an <iframe srcdoc> like the tree view (gr.HTML does not
run scripts). `window.finishOrder` lists the methods as they cross, for tests.
"""

from __future__ import annotations

import html
import json

from app.tokens import SHOWN_NAME_CHARS, TOKEN_KINDS, token_spans, token_times
from goose.charts import method_colour
from goose.trace import RunRecord

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
LANE_HEIGHT_PX = 132

_STYLE = """
body{margin:0;font:13px sans-serif;color:#111827}
.bar{display:flex;gap:14px;align-items:center;padding:6px 4px}
.lane{border:1px solid #e5e7eb;border-radius:6px;margin:6px 4px;padding:6px 8px}
.head{display:flex;gap:16px;align-items:baseline}
.name{font-weight:700;min-width:120px}
.clock,.count{font-variant-numeric:tabular-nums}
.place{margin-left:auto;font-weight:700;color:#047857}
.track{height:6px;background:#f3f4f6;border-radius:3px;margin:5px 0}
.fill{height:6px;width:0;border-radius:3px}
.text{font:13px/1.6 monospace;white-space:pre-wrap;height:78px;overflow-y:auto}
.tok{border-radius:2px}
"""

_SCRIPT = """
const DATA = JSON.parse(document.getElementById('race-data').textContent);
window.LANES = DATA;
window.finishOrder = [];
let speed = parseFloat(document.getElementById('speed').value), played = 0, last = null, lanes = [];
function setup() {
  window.finishOrder = []; played = 0; last = null;
  lanes = DATA.map((lane, i) => {
    const el = document.querySelector(`.lane[data-index="${i}"]`);
    el.querySelector('.text').textContent = '';
    el.querySelector('.place').textContent = '';
    return {lane, el, shown: 0, done: false};
  });
}
function draw(now) {
  if (last !== null) played += (now - last) / 1000 * speed;
  last = now;
  const crossing = [];
  for (const l of lanes) {
    const {lane, el} = l;
    const text = el.querySelector('.text');
    while (l.shown < lane.tokens.length && lane.tokens[l.shown][2] <= played) {
      const [piece, kind] = lane.tokens[l.shown];
      const span = document.createElement('span');
      span.className = `tok tok-${kind}`;
      span.style.background = COLOURS[kind] + '33';
      span.style.borderBottom = `2px solid ${COLOURS[kind]}`;
      span.textContent = piece;
      text.appendChild(span);
      l.shown++;
    }
    text.scrollTop = text.scrollHeight;
    el.querySelector('.clock').textContent = Math.min(played, lane.wall).toFixed(2) + ' s';
    el.querySelector('.count').textContent = `${l.shown} / ${lane.tokens.length} tokens`;
    el.querySelector('.fill').style.width = (100 * l.shown / Math.max(1, lane.tokens.length)) + '%';
    if (!l.done && played >= lane.wall && l.shown === lane.tokens.length) { l.done = true; crossing.push(l); }
  }
  crossing.sort((a, b) => a.lane.wall - b.lane.wall);
  for (const l of crossing) {
    window.finishOrder.push(l.lane.method);
    const place = window.finishOrder.length;
    const suffix = ['st', 'nd', 'rd'][place - 1] || 'th';
    l.el.querySelector('.place').textContent = place === 1 ? '1st — winner' : `finished ${place}${suffix}`;
  }
  if (lanes.some(l => !l.done)) requestAnimationFrame(draw);
}
document.getElementById('speed').addEventListener('change', e => { speed = parseFloat(e.target.value); });
document.getElementById('again').addEventListener('click', () => { setup(); requestAnimationFrame(draw); });
setup();
requestAnimationFrame(draw);
"""


def lane_data(runs: dict[str, RunRecord]) -> list[dict]:
    """Per method: its name, colour, measured wall time and (text, kind, seconds) per generated token."""
    lanes = []
    for method, run in runs.items():
        spans = token_spans(run, shown=True)
        tokens = [[text, kind, round(t, 6)] for (text, kind, _), t in zip(spans, token_times(run))]
        lanes.append({"method": method[:SHOWN_NAME_CHARS], "colour": method_colour(method),
                      "wall": round(max([run.totals.wall_s, *(t for *_, t in tokens)]), 6), "tokens": tokens,
                      "stop": run.stop_reason})
    return lanes


def lanes_page(runs: dict[str, RunRecord], speed: float = 1.0) -> str:
    """The whole offline page replaying the race; it starts playing at `speed` as soon as it loads."""
    lanes = lane_data(runs)
    data = json.dumps(lanes).replace("</", "<\\/")  # JSON inside <script> must not close the tag
    data_tag = f'<script type="application/json" id="race-data">{data}</script>'
    colours = {kind: colour for kind, (colour, _) in TOKEN_KINDS.items()}
    options = "".join(f'<option value="{s:g}"{" selected" if s == speed else ""}>{s:g}×</option>' for s in SPEEDS)
    rows = []
    for index, lane in enumerate(lanes):
        stop = f' <span style="color:#b91c1c">({html.escape(lane["stop"])})</span>' if lane["stop"] in (
            "stopped", "time_limit") else ""
        rows.append(f'<div class="lane" data-index="{index}" data-method="{html.escape(lane["method"])}">'
                    f'<div class="head"><span class="name" style="color:{lane["colour"]}">'
                    f'{html.escape(lane["method"])}</span>{stop}<span class="clock">0.00 s</span>'
                    f'<span class="count">0 tokens</span><span class="place"></span></div>'
                    f'<div class="track"><div class="fill" style="background:{lane["colour"]}"></div></div>'
                    f'<div class="text"></div></div>')
    key = " ".join(f'<span style="border-bottom:2px solid {c};background:{c}33;padding:0 4px">'
                   f'{html.escape(meaning)}</span>' for c, meaning in TOKEN_KINDS.values())
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{_STYLE}</style></head><body>"
            f'<div class="bar"><label>replay speed <select id="speed">{options}</select></label>'
            f'<button id="again">▶ replay</button><span>measured wall-clock pace</span></div>{"".join(rows)}'
            f'<div class="bar">{key}</div>{data_tag}'
            f"<script>const COLOURS = {json.dumps(colours)};{_SCRIPT}</script></body></html>")


def lanes_iframe(runs: dict[str, RunRecord] | None, speed: float = 1.0) -> str:
    """The lanes page in an <iframe srcdoc> (escaped), ready for gr.HTML; a hint when there is no race."""
    if not runs:
        return ('<div class="goose-lanes-empty" style="padding:18px;color:#6b7280">'
                "Run a race (or open a race trace in Replay) to watch the methods side by side.</div>")
    height = 70 + LANE_HEIGHT_PX * len(runs)
    return (f'<iframe class="goose-lanes" title="race lanes" style="width:100%;height:{height}px;border:1px solid '
            f'#e5e7eb;border-radius:6px" srcdoc="{html.escape(lanes_page(runs, speed), quote=True)}"></iframe>')
