"""The bench's output: the text table, the JSON file and the bar chart of speed ratios."""
from __future__ import annotations

import json

from .agreement import TOLERANCE
from .peers import PEERS

__all__ = ["table", "as_json", "write_json", "plot", "check_plotting"]


def _peer_names(report):
    """Peers that appear in any result, in registry order."""
    seen = {name for r in report.results for name in r.peers}
    return [name for name in PEERS if name in seen]


def _ratio_cell(result, peer):
    entry = result.peers.get(peer)
    if entry is None:
        return "-"
    if entry.status == "timed":
        ratio = result.ratio(peer)
        return "-" if ratio is None else f"{ratio:.2f}x"
    return {"unavailable": "n/a", "disagrees": "wrong", "failed": "failed"}[entry.status]


def _grid(rows, right_from=1):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [str(c).ljust(w) if i < right_from else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def _by_group(results):
    """The results with None between groups (W, S, G): a blank row in each table."""
    previous = None
    for r in results:
        if previous is not None and r.workload.group != previous:
            yield None
        previous = r.workload.group
        yield r


def _rows(report, header, cells):
    width = len(header)
    return _grid([header] + [[""] * width if r is None else [r.workload.name] + cells(r)
                             for r in _by_group(report.results)])


def _ms(timing):
    return f"{timing.median * 1e3:.3f}"


def table(report):
    """The whole printed report, as one string."""
    peers = _peer_names(report)

    def cells(r):
        return ([_ms(r.fastbptt)] + [_ratio_cell(r, p) for p in peers]
                + [f"{r.gflops:.1f}", f"{r.percent_of_peak:.0f}%", str(r.threads)])

    out = _rows(report, ["workload", "fastbptt ms"] + [f"vs {p}" for p in peers]
                + ["GF/s", "% peak", "threads"], cells)
    out.append("")
    out.append("vs X: X's median time / fastbptt's (higher is better for fastbptt); "
               "n/a: not installed; wrong: disagreed, not timed")
    out.append("% peak: GF/s (flop counts in fastbptt.bench.workloads) over this process's "
               f"1024x1024 gemm of the workload's dtype on {report.threads} thread(s), timed "
               "in turns with its calls (at the start of the run: "
               f"sgemm {report.peak['float32']:.1f} GF/s, "
               f"dgemm {report.peak['float64']:.1f} GF/s)")
    out += [""] + _times(report, peers) + [""] + _speeds(report, peers) + [""]
    for r in report.results:
        out.append(f"{r.workload.name}: {r.workload.describe()}, "
                   f"{r.workload.flops / 1e6:.1f} MFLOP per call")
    notes = _notes(report, peers)
    if notes:
        out += [""] + notes
    if report.startup:
        out += [""] + _startup(report.startup)
    out += [""] + _machine(report)
    return "\n".join(out)


def _times(report, peers):
    def cells(r):
        row = [f"{r.fastbptt.median * 1e3:.3f} ({r.fastbptt.cores:.1f})"]
        for p in peers:
            entry = r.peers.get(p)
            if entry is None or entry.timing is None:
                row.append("-" if entry is None else entry.status)
            else:
                calls = len(entry.timing.times)
                once = ", 1 call" if calls == 1 else ""
                row.append(f"{entry.timing.median * 1e3:.3f} ({entry.timing.cores:.1f}{once})")
        return row

    return _rows(report, ["median ms (cores)", "fastbptt"] + peers, cells) + [
        "cores: process CPU time / wall time while timing (about the number of busy cores)"]


def _speeds(report, peers):
    def cells(r):
        row = []
        for name in ["fastbptt"] + peers:
            gflops = r.gflops_of(name)
            row.append("-" if gflops is None else f"{gflops:.1f} ({100 * gflops / r.peak:.0f}%)")
        return row

    return _rows(report, ["GF/s (% peak)", "fastbptt"] + peers, cells)


def _notes(report, peers):
    notes = []
    for r in report.results:
        if r.scaling and 1 in r.scaling and 2 in r.scaling:
            t1, t2 = r.scaling[1].median, r.scaling[2].median
            p1, p2 = r.scaling_peak[1], r.scaling_peak[2]
            notes.append(f"{r.workload.name} fastbptt on 2 threads: {t2 * 1e3:.3f} ms, "
                         f"{t1 / t2:.2f}x faster than on 1 thread ({t1 * 1e3:.3f} ms); "
                         f"sgemm on 2 threads {p2:.1f} GF/s, {p2 / p1:.2f}x its 1-thread "
                         f"{p1:.1f}")
            if p2 < 1.5 * p1:
                notes.append("  warning: 2-thread sgemm is not 1.5x its 1-thread speed: "
                             "the second core was busy, the 2-thread figures say little")
    rows = [_check_row(r, p, r.peers[p]) for r in report.results for p in peers
            if p in r.peers]
    if rows:
        notes.append("peers, checked before timing against fastbptt (difference relative "
                     "to the largest entry; worst gradient named; tolerance " + ", ".join(
                         f"{v:.0e} {k}" for k, v in TOLERANCE.items()) + "):")
        notes += ["  " + line for line in _grid(rows, right_from=99)]
    return notes


def _check_row(result, peer, entry):
    agreement = entry.agreement
    if agreement is None:                   # not installed, or failed before the check
        return [result.workload.name, peer, entry.status, "", "", "", entry.note]
    value = "h" if "h" in agreement.errors else "loss"
    name, worst = agreement.worst_gradient
    verdict = {"timed": "agrees"}.get(entry.status, entry.status)
    return [result.workload.name, peer, verdict, f"vs {agreement.against}",
            f"{value} {agreement.errors[value]:.1e}", f"{name} {worst:.1e}", entry.note]


def _startup(s):
    out = []
    warm = s.get("warm_starts")
    if warm:
        out.append("warm start (fresh process, warm Numba cache; median of 3): import "
                   "fastbptt and its engine + the first call, " + ", ".join(
                       f"{cell} ({w['workload']}) {w['import_s']:.2f} + "
                       f"{w['first_call_s']:.2f} = {w['import_and_first_call_s']:.2f} s"
                       for cell, w in warm.items()))
    cold = s.get("cold_starts")
    if cold:
        out.append("cold start (each cell and dtype in a fresh process with an empty "
                   "NUMBA_CACHE_DIR): first call " + ", ".join(
                       f"{case} ({c['workload']}) {c['first_call_s']:.1f} s"
                       for case, c in cold.items()))
    mem = s.get("w5_memory")
    if mem:
        text = (f"W5 peak resident memory of a fresh process making one W5 call: "
                f"{mem['peak_rss_mb']:.0f} MB")
        if mem.get("growth_during_call_mb") is not None:
            text += (f"; the call raised the RSS from {mem['rss_before_call_mb']:.0f} MB "
                     f"by {mem['growth_during_call_mb']:.0f} MB at most")
        out.append(text)
    return out


def _machine(report):
    m = report.machine
    blas = "; ".join(f"{owner}: {b.get('internal_api')} {b.get('version')} kernel "
                     f"{b.get('architecture')}" for owner, b in m["blas"].items())
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    env = ", ".join(f"{k}={v}" if v is not None else f"{k} unset"
                    for k, v in m["environment"].items()
                    if v is not None or k.startswith("OPENBLAS"))
    out = [f"CPU: {m['cpu']} ({m['cpus']} CPUs; {' '.join(m['cpu_flags'])})",
           f"BLAS (threadpoolctl): {blas}",
           f"versions: python {m['python']}, {versions}",
           f"environment: {env}",
           f"threads: {report.threads} for every implementation",
           f"date: {report.date}",
           f"command: {report.command}"]
    return out + report.warnings


def as_json(report):
    """A JSON-serializable dict of everything measured."""
    results = []
    for r in report.results:
        peers = {}
        for name, entry in r.peers.items():
            peers[name] = {
                "status": entry.status, "note": entry.note,
                "timing": entry.timing.as_dict() if entry.timing else None,
                "ratio": r.ratio(name), "gflops": r.gflops_of(name),
                "against": entry.agreement.against if entry.agreement else None,
                "errors": entry.agreement.errors if entry.agreement else None,
            }
        results.append({
            "workload": r.workload._asdict(), "flops": r.workload.flops, "threads": r.threads,
            "fastbptt": r.fastbptt.as_dict(), "gflops": r.gflops,
            "percent_of_peak": r.percent_of_peak, "peak_gflops": r.peak, "peers": peers,
            "threads_scaling": {str(n): t.as_dict() for n, t in r.scaling.items()},
            "threads_scaling_peak_gflops": {str(n): v for n, v in r.scaling_peak.items()},
        })
    return {"date": report.date, "command": report.command, "threads": report.threads,
            "gemm_peak_gflops": report.peak, "machine": report.machine,
            "warnings": report.warnings, "startup": report.startup, "results": results}


def write_json(report, path, bridge_steps=None):
    """``as_json(report)`` (None: only the bridges' steps, with the date, command and
    machine) into ``path``, with the bridges' training steps under "bridge_steps" where
    they were timed (`fastbptt.bench.bridge_steps.as_json`)."""
    if report is None:
        from .runner import stamp
        from .timing import machine_info
        command, date = stamp()
        out = {"date": date, "command": command, "machine": machine_info(), "results": []}
    else:
        out = as_json(report)
    if bridge_steps is not None:
        out["bridge_steps"] = bridge_steps
    with open(path, "w") as f:
        json.dump(out, f, indent=2)


def check_plotting():
    """Raise SystemExit with the fix when matplotlib is missing (before measuring)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'fastbptt[plot]'") from None


def plot(report, path):
    """Bar chart of fastbptt's speed ratio against each timed peer, per workload."""
    check_plotting()
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from .._preflight import save_figure

    results = report.results
    peers = [p for p in _peer_names(report) if any(r.ratio(p) is not None for r in results)]
    names = [r.workload.name for r in results]
    fig = Figure(figsize=(1.6 + 1.3 * len(names), 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(len(peers), 1)
    for i, peer in enumerate(peers):
        xs, ys = [], []
        for j, r in enumerate(results):
            if r.ratio(peer) is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(r.ratio(peer))
        bars = ax.bar(xs, ys, width, label=f"vs {peer}")
        ax.bar_label(bars, labels=[f"{v:.1f}x" for v in ys], fontsize=8, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("peer time / fastbptt time")
    ax.set_title(f"fastbptt speed-up, {report.threads} thread(s): {report.machine['cpu']}, "
                 f"{report.date}", fontsize=9)
    if peers:
        ax.legend(fontsize=8)
    save_figure(fig, path)
