"""report.md and report.html (issue 22), written beside the charts by scripts/plot.py: titled
by the machines (host, CPU, GPU), with their versions, the summary table, every chart drawn
with the question it answers, and what was not drawn, skipped or failed and why. The HTML is
self-contained (PNGs inlined as data URIs, no external resource) so it can be mailed or
attached as one file; the Markdown links the PNGs beside it. With reference runs (plot.py
--reference), the summary is followed by this machine's cpu rows against them (tbplot/versus.py).

Both are rendered from one list of blocks: (kind, ...) tuples of h1, h2, h3, p, caption,
table, img, ul."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import tbcsv
from tbplot.charts import CHARTS
from tbplot.model import clock_notes, config_name, config_of, machine_of, panel_title
from tbplot.summary import METRICS, Summary, cell, summarise
from tbplot.versus import versus_tables

REPORT_FILES = ("report.md", "report.html")
CAPTIONS = {chart.name: chart.caption for chart in CHARTS}

VERSION_COLUMNS = ("schema_version", "framework")


# ---- content -------------------------------------------------------------------------------

def title(data) -> str:
    machines = list(dict.fromkeys(machine_of(r) for r in data.rows))
    names = [" · ".join(p for p in m if p) for m in machines[:4]]
    more = f" and {len(machines) - 4} more" if len(machines) > 4 else ""
    return "trainbench report: " + "; ".join(names) + more


def machines_table(data) -> tuple:
    """('table', headers, rows): a line per context column, a column per series."""
    by_series: dict = {}
    for r in data.rows:
        by_series.setdefault(data.series_of(r), []).append(r)
    present = list(dict.fromkeys(c for r in data.rows for c in r))
    fields = (list(VERSION_COLUMNS) + tbcsv.context_columns(present)
              + ["sgemm_gflops", "load_avg_1m", "timestamp"])
    lines = []
    for f in fields:
        values = [field_text(rs, f) for rs in by_series.values()]
        if any(v != "-" for v in values):
            lines.append([f] + values)
    return ("table", ["field"] + list(by_series), lines, None)


def field_text(rows, column: str) -> str:
    if column == "timestamp":
        return tbcsv.timestamp_range(rows)
    numbers = tbcsv.context_numbers(rows, column)
    if column == "sgemm_gflops" and numbers:
        return f"{sorted(numbers)[len(numbers) // 2]:.1f} GFLOP/s (median)"
    if column == "load_avg_1m" and numbers:
        low, high = min(numbers), max(numbers)
        return f"{low:.2f}" + (f" – {high:.2f}" if high > low else "")
    return ", ".join(tbcsv.distinct(rows, column)) or "-"


def summary_table(s: Summary) -> tuple:
    """('table', headers, rows, groups): metric-major columns, a column per configuration."""
    lead = (["machine"] if s.several_series else []) + ["model", "precision", "batch"]
    headers = lead + [f"{metric}: {name}" for metric, name in s.columns]
    groups = [(None, len(lead))] + [(m, sum(1 for c in s.columns if c[0] == m))
                                    for m in METRICS if any(c[0] == m for c in s.columns)]
    rows = []
    for line in s.lines:
        c = line.config
        who = ([line.series] if s.several_series else []) + [panel_title(c.panel), c.precision,
                                                             c.batch]
        rows.append(who + [cell(s, line, col) for col in s.columns])
    names = [name for _, name in s.columns]
    return ("table", headers, rows, (groups, lead + names))


def summary_notes(s: Summary, data) -> list[str]:
    notes = clock_notes(data, data.step_rows + data.predicted_rows)
    notes.append("The rows' own figures, medians over ok repetitions (or the median aggregate "
                 "row). speedup over cpu (speedup_vs_cpu): samples/s over the same machine's cpu "
                 "row (all cores, cpu_baseline) of the workload and variant, in the same "
                 "precision where the CPU ran it (else fp32) and the same batch where it ran it "
                 "(else the cpu row's); what differs between the two is said beside the figure "
                 "(speedup_differs: bf16 vs fp32, bs 128 vs 8). scaling efficiency "
                 "(scaling_efficiency): samples/s over N × the one-device row (baseline: gpu:1; "
                 "for mpi:N the cpu:T row of one rank). peak memory: mem_peak_bytes on a GPU, "
                 "peak_rss_bytes (the process's peak so far) on the CPU. comm share: exposed "
                 "communication / step time.")
    if s.predicted:
        notes.append("Columns named predicted are predictions of N-device scaling from a "
                     "one-device row's timeline and a link model (measurement=predicted), not "
                     "measurements.")
    if any(name for _, name in s.columns if "replicas on one GPU" in name):
        notes.append("N replicas on one GPU (shared_device) check correctness, not scaling: "
                     "they have no speedup and no scaling efficiency.")
    return notes


def status_lists(data, status: str) -> list[str]:
    """One line per machine, configuration and message of the rows with this status."""
    groups: dict = {}
    for r in data.rows:
        if r.get("status") != status or r.get("run_type") == "aggregate":
            continue
        c = config_of(r)
        key = (data.series_of(r), config_name(c), (r.get("message") or "").strip() or "no message")
        groups.setdefault(key, []).append(f"{panel_title(c.panel)} {c.precision}")
    return [f"{name} on {series}: {message} ({', '.join(dict.fromkeys(where))})"
            for (series, name, message), where in groups.items()]


def blocks(data, out: Path, written: list[str], skipped: dict) -> list[tuple]:
    s = summarise(data)
    doc = [("h1", title(data)),
           ("p", f"Drawn by scripts/plot.py from {len(data.rows)} rows; medians over ok "
                 f"repetitions. Machines and versions first, then the summary, the charts, and "
                 f"what was not drawn or not run."),
           ("h2", "Machines and versions"), machines_table(data),
           ("h2", "Summary")]
    if s.lines:
        doc += [summary_table(s)] + [("p", n) for n in summary_notes(s, data)]
    else:
        doc.append(("p", "No ok row has a samples_per_s value."))
    against = versus_tables(data)
    if against:
        doc.append(("h2", "This machine against the reference runs"))
        for t in against:
            doc += [("table", t.headers, t.rows, None)] + [("p", n) for n in t.notes]
    doc.append(("h2", "Charts"))
    for name in written:
        caption = CAPTIONS[name](data)
        doc += [("h3", name), ("caption", caption), ("img", out / f"{name}.png", caption)]
    sections = [("Charts not drawn", [f"{name}: {why}" for name, why in skipped.items()]),
                ("Skipped configurations", status_lists(data, "skipped")),
                ("Failed rows", status_lists(data, "failed"))]
    for heading, items in sections:
        if items:
            doc += [("h2", heading), ("ul", items)]
    return doc


# ---- rendering -----------------------------------------------------------------------------

def md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: list[tuple]) -> str:
    out = []
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            out += [block[1], ""]
        elif kind == "caption":
            out += [f"_{block[1]}_", ""]
        elif kind == "ul":
            out += [f"- {item}" for item in block[1]] + [""]
        elif kind == "img":
            out += [f"![{block[1].stem}]({block[1].name})", ""]
        elif kind == "table":
            _, headers, rows, _ = block
            out.append("| " + " | ".join(md_cell(h) for h in headers) + " |")
            out.append("| " + " | ".join("---:" if i and rows and looks_numeric(rows, i)
                                         else "---" for i in range(len(headers))) + " |")
            out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def looks_numeric(rows, i: int) -> bool:
    cells = [r[i] for r in rows if r[i]]
    return bool(cells) and all(c.replace(",", "").replace(".", "").isdigit() for c in cells)


STYLE = """
body { font-family: sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1400px;
       color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
div.wide { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
th { background: #f0f0f0; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
td { white-space: nowrap; }
th.group { background: #e2e8f0; }
img { max-width: 100%; box-sizing: border-box; border: 1px solid #ddd; }
p.caption { font-style: italic; color: #444; margin-bottom: 0.3em; }
"""


def html_table(block: tuple) -> list[str]:
    _, headers, rows, groups = block
    esc = html.escape
    out = ['<div class="wide"><table>']
    if groups:
        spans, names = groups
        out.append("<tr>" + "".join(f'<th class="group" colspan="{n}">{esc(m or "")}</th>'
                                    for m, n in spans) + "</tr>")
        headers = names
    out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>")
    numeric = [bool(rows) and looks_numeric(rows, i) for i in range(len(headers))]
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="n">{esc(c)}</td>' if numeric[i]
                                    else f"<td>{esc(c)}</td>" for i, c in enumerate(r))
                   + "</tr>")
    return out + ["</table></div>"]


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(doc: list[tuple]) -> str:
    esc = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{esc(doc[0][1])}</title>", f"<style>{STYLE}</style></head><body>"]
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{esc(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(block[1])}</p>")
        elif kind == "caption":
            out.append(f'<p class="caption">{esc(block[1])}</p>')
        elif kind == "ul":
            out += ["<ul>"] + [f"<li>{esc(i)}</li>" for i in block[1]] + ["</ul>"]
        elif kind == "img":
            out.append(f'<img src="{data_uri(block[1])}" alt="{esc(block[2])}">')
        elif kind == "table":
            out += html_table(block)
    return "\n".join(out + ["</body></html>"]) + "\n"


def write_report(data, out: Path, written: list[str], skipped: dict) -> list[Path]:
    """Writes report.md and report.html into out; with no chart drawn, writes nothing and
    removes an older report (the folder never mixes runs). Returns the paths written."""
    paths = [out / name for name in REPORT_FILES]
    if not written:
        for p in paths:
            if p.exists():
                p.unlink()
        return []
    doc = blocks(data, out, written, skipped)
    paths[0].write_text(render_markdown(doc), encoding="utf-8")
    paths[1].write_text(render_html(doc), encoding="utf-8")
    return paths
