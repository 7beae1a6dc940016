"""`python -m hybridbatch.bench WORKLOAD --report out.html`: one self-contained HTML page.

The page holds the run's (or sweep's) summary and plot, a policy table for the workload, the
explanation of one batched training minibatch (`scope.explain()`) and the trace of a few
training steps under `hb.profile()`, drawn as a timeline by an inline script, with the raw
Chrome trace JSON to download. Images are base64 data URIs and the trace is inline JSON, so
the file opens anywhere, offline. After loading, the page checks itself: every image decoded,
the timeline drawn, no script error and no console.error; it writes the outcome into
`#status` ("ok ..." or "errors: ..."), which tests/test_report.py reads from headless Chromium.
"""
from __future__ import annotations

import base64
import html
import io
import json

import hybridbatch as hb
from hybridbatch.config import settings
from hybridbatch.record.scope import batching
from hybridbatch.train.optim import Trainer
from .harness import _NoBar, _take, train_batched
from .policies import TooFewInstances, compare_workload
from .registry import make_workload
from .report import SPLIT_NAMES, format_result, format_sweep
from .sweep import plot_sweep

TRACE_MINIBATCHES = 3           # training steps profiled for the timeline
POLICY_MINIBATCHES = 2          # unseen minibatches the policies are judged on
SINGLES_SHOWN = 50              # nodes that ran alone, listed in the page


def plot_result(res, path):
    """One run's plot: training and inference throughput, batched and eager, and the split of
    a batched training step (ms per minibatch), as a PNG (path: a file name or a binary file)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = [m for m in ("batched", "eager") if res.get(m)]
    for k, mode in enumerate(modes):
        xs = [i + (k - (len(modes) - 1) / 2) * 0.38 for i in range(2)]
        bars = ax1.bar(xs, [res[mode][p]["throughput"] for p in ("train", "infer")], 0.38,
                       color="C0" if mode == "batched" else "C3", label=mode)
        ax1.bar_label(bars, fmt="%.0f", fontsize=8)
    ax1.set_xticks(range(2), ["training", "inference"])
    ax1.set_yscale("log")
    ax1.set_ylabel("instances / s")
    ax1.set_title(f"{res['workload']} throughput")
    ax1.legend()
    train = res["batched"]["train"]
    bottom = 0.0
    for k, (name, ms) in enumerate(train["split_seconds_per_minibatch"].items()):
        ax2.bar(0, 1e3 * ms, 0.5, bottom=bottom, color=f"C{k}", label=SPLIT_NAMES.get(name, name))
        bottom += 1e3 * ms
    ax2.set_xticks([0], ["batched training step"])
    ax2.set_xlim(-1, 2)
    ax2.set_ylabel("ms / minibatch")
    ax2.set_title(f"split of a step ({train['minibatches']} minibatches)")
    ax2.legend(fontsize=8, loc="upper right")
    c = res["config"]
    fig.suptitle(f"{res['workload']}: hidden {c['hidden']}, minibatch {c['batch']}, policy {c['policy']}, "
                 f"granularity {c['granularity']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _png(plot, data):
    """A plot function's PNG as a data URI."""
    buf = io.BytesIO()
    plot(data, buf)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _explain_minibatch(wl, instances, cfg):
    """The Explanation of one batched training minibatch (forward and backward)."""
    with batching(policy=cfg.policy, granularity=cfg.granularity) as scope:
        loss = wl.minibatch_loss(instances)
    loss.backward()
    return scope.explain()


def _profile_steps(wl, instances, cfg):
    """hb.profile() over training steps on `instances`: the Profile and its Chrome trace dict."""
    trainer = Trainer(wl.parameters(), "sgd", {"learning_rate": cfg.lr})
    with hb.profile() as prof:
        train_batched(wl, trainer, instances, cfg, _NoBar())
    return prof, prof.trace()


def collect(cfg, result):
    """What the page shows beside `result` (run_benchmark's or run_sweep's dict), measured on
    a workload built from `cfg` (a resolved Config): its policy comparison, the explanation of
    one training minibatch and the profile of TRACE_MINIBATCHES training steps after it (that
    minibatch traces and compiles what the steps need)."""
    wl = make_workload(cfg.workload, hidden=cfg.hidden, data_dir=cfg.data, seed=cfg.seed, **cfg.workload_options)
    try:                    # compare_workload hybridizes it
        policies = compare_workload(cfg.workload, hidden=cfg.hidden, batch=cfg.batch,
                                    eval_batches=POLICY_MINIBATCHES, measure=False, seed=cfg.seed,
                                    lr=cfg.lr, progress=False, workload=wl)
    except TooFewInstances as e:
        policies = str(e)
    pool = list(wl.train_instances())
    steps = _take(pool, cfg.batch * (1 + TRACE_MINIBATCHES))
    with settings(distinct_rows=cfg.distinct_rows):
        explanation = _explain_minibatch(wl, steps[:cfg.batch], cfg)
        prof, trace = _profile_steps(wl, steps[cfg.batch:], cfg)
    return {"config": cfg, "result": result, "policies": policies, "explain": explanation, "profile": prof,
            "trace": trace}


# -- rendering --------------------------------------------------------------------------

def _cell(v):
    """A table cell: numbers right-aligned (class "n"), text as it is."""
    if isinstance(v, float):
        return f'<td class="n">{v:.4g}</td>'
    if isinstance(v, int):
        return f'<td class="n">{v:,}</td>'
    return f"<td>{html.escape('-' if v is None else str(v))}</td>"


def _table(rows, columns=None):
    """An HTML table of dicts (columns: their keys, or (key, header) pairs)."""
    if not rows:
        return "<p>none</p>"
    columns = columns or [(k, k.replace("_", " ")) for k in rows[0]]
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(k)) for k, _ in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _policy_section(policies):
    if isinstance(policies, str):
        return f"<p>Not compared: {html.escape(policies)}</p>"
    rows = [{"policy": name, **p} for name, p in policies["policies"].items()]
    columns = [("policy", "policy"), ("batches", "batches"), ("lower_bound", "lower bound"),
               ("ratio", "batches / bound"), ("ratio_tight", "batches / tight bound"),
               ("schedule_seconds", "scheduling s"), ("schedule_vs_agenda", "vs agenda"),
               ("learn_seconds", "learning s")]
    return (f"<p>Each policy schedules the graphs of {policies['eval_minibatches']} training minibatches "
            f"(granularity {html.escape(policies['granularity'])}); the learned fsm-* policies learn on the "
            f"minibatches before them. Lower bound {policies['lower_bound']}, tight bound "
            f"{policies['tight_lower_bound']}.</p>" + _table(rows, columns))


def _explain_section(explanation):
    d = explanation.as_dict()
    summary = {k: v for k, v in d.items() if not isinstance(v, (list, dict))}
    summary.update({f"{k} s": v for k, v in d.get("seconds", {}).items()})
    singles = d.get("singles", [])
    more = (f"<p>... and {len(singles) - SINGLES_SHOWN} more.</p>" if len(singles) > SINGLES_SHOWN else "")
    return (_table([summary]) + "<h3>Batches per signature</h3>" + _table(d.get("signatures", []))
            + f"<h3>Nodes that ran in a batch of one ({len(singles)})</h3>" + _table(singles[:SINGLES_SHOWN])
            + more)


def _trace_section(prof, trace):
    phases = [{"phase": k, "seconds": v} for k, v in prof.phases().items()]
    # "<" escaped, so that no string in the trace can close the script element
    data = json.dumps(trace).replace("<", "\\u003c")
    return (f"<p>{TRACE_MINIBATCHES} batched training steps under <code>hb.profile()</code>: one lane per "
            "category (phase spans, forward and backward batches), hover a span for its name and "
            'duration. <a id="trace-download" download="trace.json" href="#">Download the Chrome trace '
            "JSON</a> (opens in Perfetto or chrome://tracing).</p>"
            '<div id="timeline"></div>' + _table(phases)
            + "<h3>Signatures that took the most time</h3>" + _table(prof.top(10))
            + f'<script type="application/json" id="trace-json">{data}</script>')


# Installed first, so that errors of the scripts after it and failed loads are counted.
ERROR_CAPTURE = """
window.reportErrors = [];
window.addEventListener("error", (e) => {
  const t = e.target;
  reportErrors.push(t && t !== window ? "failed to load " + (t.tagName || "") + " " + String(t.src || t.href || "").slice(0, 60)
                                      : String(e.message));
}, true);
const consoleError = console.error.bind(console);
console.error = (...args) => { reportErrors.push(args.map(String).join(" ")); consoleError(...args); };
"""

# Draws the trace (#trace-json) as an SVG timeline, makes the download link, then checks the page.
TIMELINE = """
const SVG = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function colour(name) {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 360;
  return `hsl(${h}, 60%, 55%)`;
}
function drawTimeline(events, box) {
  const lanes = [...new Set(["phase", "forward", "backward", ...events.map((e) => e.cat)])]
    .filter((c) => events.some((e) => e.cat === c));
  const t0 = events.reduce((m, e) => Math.min(m, e.ts), Infinity);
  const t1 = events.reduce((m, e) => Math.max(m, e.ts + e.dur), -Infinity);
  const left = 80, width = 1000, lane = 26, span = Math.max(t1 - t0, 1e-9);
  const svg = el("svg", {viewBox: `0 0 ${left + width + 30} ${lanes.length * lane + 30}`, width: "100%"}, box);
  lanes.forEach((c, i) => el("text", {x: 4, y: i * lane + 17, "font-size": 12}, svg).textContent = c);
  let drawn = 0;
  for (const e of events) {
    const r = el("rect", {x: left + (e.ts - t0) / span * width, y: lanes.indexOf(e.cat) * lane + 3,
                          width: Math.max(e.dur / span * width, 0.5), height: lane - 6, fill: colour(e.name)}, svg);
    el("title", {}, r).textContent = `${e.name}: ${(e.dur / 1e3).toFixed(3)} ms ${JSON.stringify(e.args || {})}`;
    drawn += 1;
  }
  for (let k = 0; k <= 5; k++) {
    const x = left + k * width / 5, y = lanes.length * lane;
    el("line", {x1: x, x2: x, y1: 0, y2: y + 4, stroke: "#bbb"}, svg);
    el("text", {x: x, y: y + 18, "font-size": 11, "text-anchor": "middle"}, svg).textContent =
      `${(k * span / 5 / 1e3).toFixed(1)} ms`;
  }
  for (const name of new Set(events.filter((e) => e.cat === "phase").map((e) => e.name))) {
    const item = document.createElement("span"), swatch = document.createElement("i");
    swatch.style.background = colour(name);
    item.append(swatch, name);
    box.appendChild(item);
  }
  return drawn;
}
let spans = 0;
try {
  const text = document.getElementById("trace-json").textContent;
  spans = drawTimeline(JSON.parse(text).traceEvents, document.getElementById("timeline"));
  document.getElementById("trace-download").href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
} catch (e) {
  reportErrors.push("timeline: " + e);
}
window.addEventListener("load", () => {
  const images = [...document.images];
  const broken = images.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => "image not shown: " + i.alt);
  const problems = [...reportErrors, ...broken, ...(spans ? [] : ["no trace span drawn"])];
  document.getElementById("status").textContent = problems.length ? "errors: " + problems.join("; ")
                                                                   : `ok images=${images.length} spans=${spans}`;
});
"""

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 12px; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
th { background: #eee; }
td.n { text-align: right; }
#timeline span { display: inline-block; margin-right: 1em; font-size: 12px; }
#timeline i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
#status { color: #777; font-size: 11px; margin-top: 2em; }
"""


def render(report):
    """The page, as a string, of what `collect` returned."""
    result = report["result"]
    sweep = "sweep" in result
    title = f"{result['workload']} benchmark report"
    summary = format_sweep(result) if sweep else format_result(result)
    plot = _png(plot_sweep, result) if sweep else _png(plot_result, result)
    plot_alt = f"sweep over {result['sweep']}" if sweep else "throughput and step split"
    c = report["config"]
    measured_at = (f"The sections below ran {html.escape(c.workload)} at hidden {c.hidden}, minibatch {c.batch}; "
                   f"the explanation and the trace under policy {html.escape(str(c.policy))}, granularity "
                   f"{html.escape(c.granularity)}, the policy comparison under every policy at the workload's "
                   f"default granularity.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style><script>{ERROR_CAPTURE}</script></head>
<body>
<h1>{html.escape(title)}</h1>
<h2>{'Sweep' if sweep else 'Run'}</h2>
<pre>{html.escape(summary)}</pre>
<img alt="{html.escape(plot_alt)}" src="{plot}">
<p>{measured_at}</p>
<h2>Scheduling policies</h2>
{_policy_section(report["policies"])}
<h2>One batched training minibatch, explained</h2>
{_explain_section(report["explain"])}
<h2>Trace of training steps</h2>
{_trace_section(report["profile"], report["trace"])}
<div id="status">not checked: scripts did not run</div>
<script>{TIMELINE}</script>
</body></html>
"""


def write_report(path, cfg, result):
    """Collect what the page needs beside `result` (see `collect`), render it, write it to path."""
    page = render(collect(cfg.resolved(), result))
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path
