"""The human-readable summary of a harness result (and of a sweep)."""
from __future__ import annotations

SPLIT_NAMES = {"record": "recording", "schedule": "scheduling", "forward": "forward",
               "backward": "backward", "update": "update", "read": "reading", "other": "other"}


def _products(m):
    """The BLAS mode (in "auto", which library takes how many rows) and OpenBLAS's kernels
    with the settings that pinned them."""
    text = mode = m.get("host_products", "numpy")
    rows, below, single = m.get("numpy_from"), m.get("kernel_below"), m.get("one_row")
    if mode == "auto" and rows and below and single:
        text += " (" + "; ".join(f"{layout} weight: 1 row {one}, the few-rows kernel below {k} rows, otherwise "
                                 + ("MKL" if r is None else f"numpy from {r} rows")
                                 for layout, k, r, one in zip(("C-ordered", "transposed"), below, rows, single)) + ")"
    if mode != "mkl" and m.get("flip_below"):
        text += f"; numpy's x @ W.T under {m['flip_below']} rows as (W x^T)^T"
    cores = [b["architecture"] for b in m.get("blas_threads") or () if b.get("api") == "openblas"]
    if cores:
        text += f"; OpenBLAS kernels: {cores[0]}"
    pinned = m.get("blas_kernel_settings")
    if pinned:
        text += " (" + ", ".join(f"{k}={v}" for k, v in pinned.items()) + ")"
    return text


def _fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def _pct(x):
    if x is None:
        return "-"
    return f"{100 * x:.2f}%" if abs(x) < 0.01 else f"{100 * x:.1f}%"


def _split_table(title, part):
    steps = part["minibatches"]
    lines = [f"{title} (median run, {steps} minibatches)",
             f"  {'':<12}{'s total':>10}{'ms/step':>10}{'share':>9}"]
    for k, v in part["split_seconds"].items():
        lines.append(f"  {SPLIT_NAMES.get(k, k):<12}{v:>10.3f}{1e3 * v / steps:>10.2f}"
                     f"{_pct(part['split_shares'][k]):>9}")
    total = sum(part["split_seconds"].values())
    lines.append(f"  {'total':<12}{total:>10.3f}{1e3 * total / steps:>10.2f}{'100.0%':>9}")
    return lines


def format_result(res):
    """The summary table of one `run_benchmark` result, as text."""
    c = res["config"]
    m = res.get("machine") or {}
    b, e, s = res["batched"], res["eager"], res["speedup"]
    lines = [f"{res['workload']}: {res['description']}",
             f"data {res['data']} ({res['train_pool']} training instances); hidden {c['hidden']}, "
             f"minibatch {c['batch']}, policy {c['policy']}, granularity {c['granularity']}, "
             f"SGD lr {c['lr']}, distinct rows {'on' if c.get('distinct_rows', True) else 'off'}"]
    eager_txt = f"eager {res['eager_instances']} instances" if e else "no eager run"
    lines.append(f"measured: {c['instances']} instances batched, {eager_txt}; warm-up {c['warmup']} "
                 f"(eager {c['eager_warmup']}); median of {c['repeats']} run(s)")
    if m:
        threads = ", ".join(f"{k.split('_')[0]}={v}" for k, v in m["thread_settings"].items())
        lines.append(f"machine: {m['cpu_model']}; {m['cpus_usable']} usable CPUs; threads {threads}; "
                     f"numpy {m['numpy']}, numba {m['numba']}; host products: {_products(m)}")
    la = res.get("load_average") or {}
    if la.get("start") and la.get("end"):
        lines.append(f"load average (1 min) at start {la['start'][0]:.2f}, at end {la['end'][0]:.2f}")
    g = res["gemm"]
    lines.append(f"GEMM {g['shape'][0]}x{g['shape'][1]} @ {g['shape'][1]}x{g['shape'][2]} float32: "
                 f"{g['flops_per_second'] / 1e9:.1f} GFLOP/s (before {g['flops_per_second_before'] / 1e9:.1f}, "
                 f"next to each repeat " + ", ".join(f"{x / 1e9:.1f}" for x in g["flops_per_second_runs"])
                 + f", after {g['flops_per_second_after'] / 1e9:.1f})")
    libs = g.get("flops_per_second_by_library_before") or {}
    if len(libs) > 1:
        lines.append("  the faster library per sample (before: " +
                     ", ".join(f"{lib} {v / 1e9:.1f}" for lib, v in libs.items()) + ")")
    lines.append("")
    lines.append(f"{'':<24}{'batched':>12}{'eager':>12}{'speedup':>10}")

    def row(name, phase, field, scale=1.0, spec=".1f", pct=False):
        bv = b[phase][field]
        ev = e[phase][field] if e else None
        if pct:
            lines.append(f"{name:<24}{_pct(bv):>12}{_pct(ev):>12}")
            return
        sp = s.get(phase) if field == "throughput" else None
        lines.append(f"{name:<24}{_fmt(bv * scale, spec):>12}"
                     f"{_fmt(None if ev is None else ev * scale, spec):>12}"
                     f"{(_fmt(sp, '.2f') + 'x') if sp is not None else '':>10}")

    row("training inst/s", "train", "throughput")
    row("inference inst/s", "infer", "throughput")
    row("training GFLOP/s", "train", "flops_per_second", 1e-9, ".2f")
    row("inference GFLOP/s", "infer", "flops_per_second", 1e-9, ".2f")
    row("training efficiency", "train", "efficiency", pct=True)
    row("inference efficiency", "infer", "efficiency", pct=True)
    lines.append("")
    for phase, name in (("train", "training"), ("infer", "inference")):
        p = b[phase]
        lines.append(f"{name} batches / lower bound: {p['batches']} / {p['lower_bound']} = "
                     f"{_fmt(p['batches_over_lower_bound'], '.3f')}x over {p['minibatches']} minibatches; "
                     f"{p['nodes']} nodes ({_fmt(p['nodes_per_batch'], '.1f')} per batch); "
                     f"plan cache hits {p['plan_cache_hits']}/{p['flushes']} flushes")
    lines.append("")
    lines += _split_table("batched training step split", b["train"])
    lines.append("")
    lines += _split_table("batched inference split", b["infer"])
    if e:
        lines.append("")
        lines += _split_table("eager training step split", e["train"])
    if res.get("check"):
        ch = res["check"]
        lines.append("")
        lines.append(f"check: batched vs eager loss on {ch['instances']} instances, same parameters: "
                     f"max abs diff {ch['max_abs_loss_diff']:.2e}, max rel diff {ch['max_rel_loss_diff']:.2e}")
    lines.append(f"wall time {res['total_seconds']:.1f} s (setup {res['setup_seconds']:.1f} s)")
    return "\n".join(lines)


def format_sweep(sweep):
    """One line per swept value."""
    key = sweep["sweep"]
    lines = [f"{sweep['workload']} sweep over {key} (instances/s; b = batched, e = eager)",
             f"{key:>8}{'train b':>11}{'train e':>10}{'speedup':>9}{'infer b':>11}"
             f"{'infer e':>10}{'speedup':>9}{'eff train':>11}{'batch/lb':>10}"]
    for v, r in zip(sweep["values"], sweep["results"]):
        b, e, s = r["batched"], r["eager"], r["speedup"]
        lines.append(f"{v:>8}{b['train']['throughput']:>11.1f}"
                     f"{_fmt(e['train']['throughput'] if e else None):>10}"
                     f"{_fmt(s['train'], '.2f'):>9}"
                     f"{b['infer']['throughput']:>11.1f}"
                     f"{_fmt(e['infer']['throughput'] if e else None):>10}"
                     f"{_fmt(s['infer'], '.2f'):>9}"
                     f"{_pct(b['train']['efficiency']):>11}"
                     f"{_fmt(b['train']['batches_over_lower_bound'], '.3f'):>10}")
    return "\n".join(lines)
