"""The page `mua view` writes: one HTML file with its styles and script inline (no server, no
network), over the records of `mua.view.sources`.

Every transcript is rendered here as an `<article class="traj">` whose data attributes the script
filters on (checkpoint, reward, termination, gym); trained tokens are `k-trained` spans. "Compare"
sets two checkpoints side by side; the view's state lives in the URL fragment, so a view can be
linked. Reward curves are inline SVG; the script only shows, hides and clones what is rendered.
`SUMMARY_TAG` marks a page `mua view` may write over.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from mua.rollout.render import collapse, message_text
from mua.view.sources import ViewData

CURVE_COLORS = ("#2a7", "#27c", "#c72", "#a3a")
# Near the page's end, in every page `mua view` has written: how it knows a page it may replace
SUMMARY_TAG = "<script type='application/json' id='mua-view-summary'>"

CSS = """body{font-family:system-ui,sans-serif;margin:0 auto;max-width:90em;padding:0 1em;color:#222}
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ccc;padding:.5em 0;z-index:1}
.controls label{margin-right:1em;white-space:nowrap}.controls input[type=number]{width:5em}
.traj{border:1px solid #ccc;border-radius:4px;margin:.8em 0;padding:.5em}
.traj h3{font-size:1em;margin:.2em 0}.meta{color:#666;font-size:.9em}
.msg{white-space:pre-wrap;margin:.3em 0;padding:.3em;border-left:4px solid #999}
.system{border-color:#aaa;color:#666}.user{border-color:#2a9}.assistant{border-color:#3a3}
.tool{border-color:#a3a}.env{border-color:#cc0}
.tokens{white-space:pre-wrap;font-size:.85em}.k-trained{background:#cfc;outline:1px solid #9c9}
.k-env{background:#ffc}.k-tool{background:#fcf}.k-user{background:#cef}.k-prompt{color:#777}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;border-top:2px solid #ddd}
.curves svg{background:#fafafa;border:1px solid #ddd;margin:.3em}.legend span{margin-right:1em}
#count{font-weight:bold}"""

SCRIPT = r"""
(function(){
const $=s=>document.querySelector(s), all=[...document.querySelectorAll('#list .traj')];
const ctl={ckpt:$('#f-ckpt'),min:$('#f-min'),max:$('#f-max'),gym:$('#f-gym'),a:$('#f-a'),b:$('#f-b')};
const terms=[...document.querySelectorAll('.f-term')];
function state(){const p=new URLSearchParams(location.hash.slice(1));return p;}
function apply(p){
  for(const k of ['ckpt','min','max','gym','a','b']) if(p.has(k)) ctl[k].value=p.get(k);
  if(p.has('term')){const want=p.get('term').split(',');terms.forEach(t=>t.checked=want.includes(t.value));}
}
function save(){
  const p=new URLSearchParams();
  for(const k of ['ckpt','min','max','gym','a','b']) if(ctl[k].value!=='') p.set(k,ctl[k].value);
  const on=terms.filter(t=>t.checked).map(t=>t.value);
  if(on.length!==terms.length) p.set('term',on.join(','));
  history.replaceState(null,'','#'+p.toString());
}
function keep(el, ckpt){
  const r=parseFloat(el.dataset.reward), lo=parseFloat(ctl.min.value), hi=parseFloat(ctl.max.value);
  const on=new Set(terms.filter(t=>t.checked).map(t=>t.value));
  return (!ckpt||el.dataset.ckpt===ckpt)&&(isNaN(lo)||r>=lo)&&(isNaN(hi)||r<=hi)
    &&on.has(el.dataset.termination)&&(!ctl.gym.value||el.dataset.gym===ctl.gym.value);
}
function key(el){return el.dataset.gym+'/'+el.dataset.task+'/'+el.dataset.sample;}
function render(){
  let shown=0;
  for(const el of all){const k=keep(el,ctl.ckpt.value); el.hidden=!k; shown+=k;}
  $('#count').textContent=shown;
  const box=$('#compare'); box.replaceChildren();
  const A=ctl.a.value, B=ctl.b.value;
  $('#list').hidden=!!(A&&B);
  if(A&&B){
    const right=new Map();
    for(const el of all) if(keep(el,B)) right.set(key(el),el);
    let pairs=0;
    for(const el of all){
      if(!keep(el,A)||!right.has(key(el))) continue;
      const row=document.createElement('div'); row.className='pair'; row.dataset.key=key(el);
      const l=el.cloneNode(true), r=right.get(key(el)).cloneNode(true); l.hidden=false; r.hidden=false;
      row.append(l,r); box.append(row); pairs++;
    }
    $('#pairs').textContent=pairs+' pair(s) of the same task and sample in both';
  } else $('#pairs').textContent='';
  save();
}
apply(state());
document.querySelectorAll('header select, header input').forEach(e=>e.addEventListener('change',render));
$('#f-clear').addEventListener('click',()=>{ctl.a.value='';ctl.b.value='';render();});
window.addEventListener('hashchange',()=>{apply(state());render();});
render();
})();
"""


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _message(msg: dict) -> str:
    role = _esc(msg.get("role", "?"))
    text = message_text(msg)
    body = _esc(text)
    if role == "system" and collapse(text) != text:
        body = f"<details><summary>{_esc(collapse(text))}</summary>{body}</details>"
    return f"<div class='msg {role}'><b>{role}</b>: {body}</div>"


def _article(rec: dict, label: str) -> str:
    rewards = ", ".join(f"{r:g}" for r in rec["turn_rewards"])
    detail = f" ({rec['detail']})" if rec["detail"] else ""
    head = (
        f"{label} · {rec['gym']} · task {rec['task_id']} · sample {rec['sample_index']} · "
        f"reward {rec['reward']:g}" + (f" [{rewards}]" if rewards else "")
    )
    meta = f"{rec['num_turns']} turns · {rec['termination']}{detail}"
    if rec.get("splits"):  # a program gym's session that split (`mua.gateway`)
        meta += f" · {rec['splits']} gateway splits ({rec['splits'] + 1} training samples)"
    parts = [
        f"<article class='traj' data-ckpt='{_esc(rec['checkpoint'])}' data-gym='{_esc(rec['gym'])}' "
        f"data-task='{_esc(rec['task_id'])}' data-sample='{rec['sample_index']}' "
        f"data-reward='{rec['reward']!r}' data-termination='{_esc(rec['termination'])}'>",
        f"<h3>{_esc(head)}</h3><div class='meta'>{_esc(meta)}</div>",
    ]
    parts += [_message(m) for m in rec["messages"]]
    if rec.get("token_runs"):
        spans = "".join(
            f"<span class='k-{_esc(kind)}'>{_esc(text)}</span>" for kind, text in rec["token_runs"]
        )
        parts.append(
            "<details class='tokenview'><summary>tokens (green: trained)</summary>"
            f"<pre class='tokens'>{spans}</pre></details>"
        )
    parts.append("</article>")
    return "".join(parts)


def curve_svg(name: str, series: dict[str, list[tuple[int, float]]], width=520, height=180) -> str:
    """One chart of a run's curves: a polyline per series over its logged steps."""
    pad = 30
    points = [p for values in series.values() for p in values]
    x0, x1 = min(s for s, _ in points), max(s for s, _ in points)
    y0, y1 = min(0.0, min(v for _, v in points)), max(1.0, max(v for _, v in points))

    def xy(step: int, value: float) -> str:
        x = pad + (step - x0) / max(x1 - x0, 1) * (width - 2 * pad)
        y = height - pad - (value - y0) / max(y1 - y0, 1e-9) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    lines, legend = [], []
    for color, (key, values) in zip(CURVE_COLORS, series.items(), strict=False):
        coords = " ".join(xy(s, v) for s, v in values)
        lines.append(
            f"<polyline data-series='{_esc(key)}' fill='none' stroke='{color}' stroke-width='1.5' "
            f"points='{coords}'><title>{_esc(key)}</title></polyline>"
        )
        legend.append(
            f"<span style='color:{color}'>■ {_esc(key)} (last {values[-1][1]:.3f})</span>"
        )
    axes = (
        f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='#999'/>"
        f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='#999'/>"
        f"<text x='{pad}' y='{height - 10}' font-size='10'>step {x0}</text>"
        f"<text x='{width - pad}' y='{height - 10}' font-size='10' text-anchor='end'>step {x1}</text>"
        f"<text x='2' y='{pad}' font-size='10'>{y1:g}</text>"
        f"<text x='2' y='{height - pad}' font-size='10'>{y0:g}</text>"
    )
    return (
        f"<figure data-run='{_esc(name)}'><figcaption>{_esc(name)}</figcaption>"
        f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}'>{axes}{''.join(lines)}</svg>"
        f"<div class='legend'>{''.join(legend)}</div></figure>"
    )


def audit_section(audits: dict[str, dict]) -> str:
    """Each audited evaluation's simulated users, most faithful first, and their worst turns."""
    parts = []
    for name, audit in audits.items():
        rows = "".join(
            f"<tr><td>{_esc(u)}</td><td>{_esc(_fidelity(audit['users'][u]))}</td>"
            f"<td>{audit['users'][u]['flagged']}/{audit['users'][u]['turns']}</td>"
            f"<td>{_esc(', '.join(f'{k} {v}' for k, v in sorted(audit['users'][u]['rules'].items())))}</td></tr>"
            for u in audit.get("ranking", [])
        )
        worst = "".join(
            f"<li><b>{_esc(u)}</b> · {_esc(ex['cell'])} · task {_esc(ex['task_id'])} "
            f"#{_esc(ex['sample_index'])}: {_esc(ex['why'])}<br>agent: {_esc(ex['agent'])}"
            f"<br>user: {_esc(ex['user'])}</li>"
            for u, examples in audit.get("worst", {}).items()
            for ex in examples
        )
        parts.append(
            f"<h3>simulated users · {_esc(name)}</h3><table class='audit'><tr><th>user</th>"
            f"<th>fidelity</th><th>flagged turns</th><th>rules broken</th></tr>{rows}</table>"
            + (f"<ul>{worst}</ul>" if worst else "")
        )
    return f"<section class='audit'>{''.join(parts)}</section>" if parts else ""


def _fidelity(stats: dict) -> str:
    value = stats.get("fidelity")
    return "–" if value is None else f"{value:.2f}"


def _options(pairs: list[tuple[str, str]], blank: str) -> str:
    opts = [f"<option value=''>{_esc(blank)}</option>"]
    opts += [f"<option value='{_esc(v)}'>{_esc(label)}</option>" for v, label in pairs]
    return "".join(opts)


def render_page(data: ViewData, title: str) -> str:
    labels = {c.key: c.label for c in data.checkpoints}
    ckpts = [(c.key, c.label) for c in data.checkpoints]
    gyms = sorted({r["gym"] for r in data.records})
    terminations = sorted({r["termination"] for r in data.records})
    term_boxes = "".join(
        f"<label><input type='checkbox' class='f-term' value='{_esc(t)}' checked> {_esc(t)}</label>"
        for t in terminations
    )
    controls = (
        "<div class='controls'>"
        f"<label>checkpoint <select id='f-ckpt'>{_options(ckpts, 'all')}</select></label>"
        "<label>reward from <input id='f-min' type='number' step='any'></label>"
        "<label>to <input id='f-max' type='number' step='any'></label>"
        f"<label>gym <select id='f-gym'>{_options([(g, g) for g in gyms], 'all')}</select></label>"
        f"<span>ended: {term_boxes}</span><br>"
        f"<label>compare <select id='f-a'>{_options(ckpts, '—')}</select></label>"
        f"<label>with <select id='f-b'>{_options(ckpts, '—')}</select></label>"
        "<button id='f-clear' type='button'>stop comparing</button> "
        "<span id='pairs'></span> · <span id='count'></span> transcripts shown</div>"
    )
    curves = "".join(curve_svg(name, series) for name, series in data.curves.items())
    articles = "\n".join(_article(r, labels[r["checkpoint"]]) for r in data.records)
    summary = json.dumps(
        {"runs": data.runs, "checkpoints": len(data.checkpoints), "transcripts": len(data.records)}
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h2>{_esc(title)}</h2>{controls}</header>"
        f"<section class='curves'>{curves}</section>{audit_section(data.audits)}"
        f"<section id='compare'></section><section id='list'>{articles}</section>"
        f"{SUMMARY_TAG}{summary}</script>"
        f"<script>{SCRIPT}</script></body></html>"
    )


def is_view_page(path: str | Path) -> bool:
    """True when `path` is a page `mua view` wrote (its summary script is in its last 16 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, 2) - 16384, 0))
            return SUMMARY_TAG.encode() in f.read()
    except OSError:
        return False


def write_page(data: ViewData, path: str | Path, title: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_page(data, title), encoding="utf-8")
    tmp.replace(path)
    return path
