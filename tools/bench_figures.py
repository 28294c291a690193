"""The benchmarks as pictures: draws ``docs/benchmarks/figures/*.png`` from the recorded numbers
in ``docs/benchmarks/data/*.json`` (each file names the command that measured it, the machine,
the date and the tree).

    python3 -m tools.bench_figures           # draw every figure (needs matplotlib: '.[docs]')
    python3 -m tools.bench_figures --check   # exit 1 naming figures drawn from older data

The figures are committed, not drawn at docs time: the README shows the headline figure from the
repository (GitHub renders no Sphinx), and the docs build then needs no plotting stack. Each PNG
carries the SHA-256 of the data file it was drawn from (a ``tEXt`` chunk, ``Source-SHA256``);
``--check`` (and ``tests/test_docs.py``) reads it back with the standard library, so a figure
cannot silently show numbers its data file no longer has.

To add a measurement: append it to the data file (or add a file and a function below), run this,
commit both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "benchmarks" / "data"
FIGURES = ROOT / "docs" / "benchmarks" / "figures"
KEY = "Source-SHA256"

# One colour per side, the same in every figure.
COLOURS = {
    "echomq trio": "#2f6db5",
    "trio": "#2f6db5",
    "echomq glide": "#8fb3e0",
    "glide": "#8fb3e0",
    "BullMQ": "#d9822b",
}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def png_text(path: Path) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG file (standard library only)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    out: dict[str, str] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        at += 12 + length
    return out


# --- the figures: each takes its data and returns a matplotlib Figure ------------------------


def _style() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "axes.axisbelow": True, "figure.dpi": 110,
        "svg.hashsalt": "echomq", "axes.titlesize": 11, "axes.titleweight": "bold",
    })  # fmt: skip
    return plt


def _footer(fig: Any, data: dict[str, Any]) -> None:
    when = data.get("date", "")
    text = f"{data['command']}\n{data['machine']}" + (f" · {when}" if when else "")
    fig.text(0.01, 0.005, text, fontsize=7, color="#555555", va="bottom", ha="left", wrap=True)


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def _grouped_bars(ax: Any, rows: dict[str, list[float]], sides: list[str], unit: str) -> None:
    import numpy as np

    labels = list(rows)
    y = np.arange(len(labels))
    height = 0.8 / len(sides)
    for i, side in enumerate(sides):
        values = [rows[label][i] for label in labels]
        bars = ax.barh(y + (i - (len(sides) - 1) / 2) * height, values, height * 0.92,
                       label=side, color=COLOURS.get(side))  # fmt: skip
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=7.5)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.xaxis.set_major_formatter(_thousands())
    ax.margins(x=0.15)
    ax.grid(axis="y", visible=False)


def peers(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, (top, cpu, late) = plt.subplots(
        3, 1, figsize=(8.2, 9.4), gridspec_kw={"height_ratios": [5, 3, 2.6]}
    )
    sides = data["sides"]
    _grouped_bars(top, data["throughput_per_s"], sides, "per second (more is better)")
    top.set_title(f"Throughput beside BullMQ on one Redis ({data['date'][:10]})")
    top.legend(loc="lower right", frameon=False)
    _grouped_bars(cpu, data["cpu_us_per_job"], sides, "µs of CPU per job (less is better)")
    cpu.set_title("CPU per job")
    import numpy as np

    names = list(data["lateness_ms"])
    x = np.arange(len(names))
    width = 0.8 / len(sides)
    for i, side in enumerate(sides):
        p50 = [data["lateness_ms"][n]["p50"][i] for n in names]
        p99 = [data["lateness_ms"][n]["p99"][i] for n in names]
        pos = x + (i - (len(sides) - 1) / 2) * width
        late.bar(pos, p99, width * 0.92, color=COLOURS.get(side), alpha=0.35)
        bars = late.bar(pos, p50, width * 0.92, color=COLOURS.get(side), label=side)
        late.bar_label(bars, labels=[f"{v:g}" for v in p50], padding=2, fontsize=7.5)
        for px, v in zip(pos, p99, strict=True):
            late.text(px, v, f"{v:g}", ha="center", va="bottom", fontsize=7, color="#555555")
    late.set_yscale("log")
    late.set_ylim(1, 400)
    late.set_xticks(x, names)
    late.set_ylabel("ms late (log)")
    late.set_title("Scheduled jobs: lateness p50 (solid) and p99 (pale)")
    late.grid(axis="x", visible=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    _footer(fig, data)
    return fig


def headline(data: dict[str, Any]) -> Any:
    """The README's one small picture: throughput and lateness beside BullMQ."""
    plt = _style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, 2.7),
                                      gridspec_kw={"width_ratios": [3, 1.25]})  # fmt: skip
    keep = ["one enqueue at a time", "batch enqueue, 1,000 a call",
            "no-op jobs, defaults (BullMQ c10)", "64 tasks enqueueing one job each"]  # fmt: skip
    sides = ["echomq trio", "BullMQ"]
    index = [data["sides"].index(s) for s in sides]
    rows = {k: [data["throughput_per_s"][k][i] for i in index] for k in keep}
    _grouped_bars(left, rows, sides, "per second")
    left.set_title("Jobs per second", loc="left")
    left.legend(loc="lower right", frameon=False, fontsize=8)
    name = "100 jobs 30 ms apart"
    p50 = [data["lateness_ms"][name]["p50"][i] for i in index]
    bars = right.bar(["echomq", "BullMQ"], p50, color=[COLOURS[s] for s in sides], width=0.6)
    right.bar_label(bars, labels=[f"{v:g} ms" for v in p50], padding=2, fontsize=8)
    right.set_title("Scheduled jobs:\nms late, p50", fontsize=10)
    right.set_yticks([])
    right.margins(y=0.2)
    right.grid(axis="x", visible=False)
    fig.suptitle(f"echomq_trio beside BullMQ 6.7 on one Redis 8.2, 2-core VM, {data['date'][:10]}",
                 fontsize=8, color="#555555", y=0.02, va="bottom")  # fmt: skip
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def transports(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 4.6))
    rows = {k: [max(v[0]), max(v[1])] for k, v in data["throughput_per_s"].items()}
    lows = {k: [min(v[0]), min(v[1])] for k, v in data["throughput_per_s"].items()}
    _grouped_bars(ax, rows, data["sides"], "per second, the better of two runs (tick: the other)")
    import numpy as np

    y = np.arange(len(rows))
    for i in range(2):
        ax.scatter([lows[k][i] for k in rows], y + (i - 0.5) * 0.4, marker="|", s=120,
                   color="#222222", zorder=3)  # fmt: skip
    ax.set_title(f"The two transports ({data['date'][:10]})")
    ax.legend(loc="lower right", frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _footer(fig, data)
    return fig


def lanes(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 4.8))
    labels = [s["label"] for s in data["steps"]]
    for i, step in enumerate(data["steps"]):
        ratios = [m / o for o, m in zip(step["one_lane"], step["many_lanes"], strict=True)]
        ax.scatter(ratios, [i] * len(ratios), color=COLOURS["trio"], s=28, zorder=3)
        ax.text(max(ratios) + 0.015, i, f"{sorted(ratios)[len(ratios) // 2]:.2f}",
                va="center", fontsize=8)  # fmt: skip
    ax.axvline(0.95, color="#d9822b", linestyle="--", linewidth=1)
    ax.text(0.955, -0.6, "goal 0.95", color="#d9822b", fontsize=8, va="bottom")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("jobs/s at 100,000 lanes ÷ jobs/s in one lane, same run (median labelled)")
    ax.set_title("Cost as the lanes grow (1.0: lanes cost nothing)", pad=14)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _footer(fig, data)
    return fig


def lateness_parts(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 3.8))
    names = list(data["runs"])
    colours = ["#2f6db5", "#8fb3e0", "#c9d9ef"]
    for row, name in enumerate(names):
        left = 0.0
        for i, part in enumerate(data["parts"]):
            value = data["runs"][name]["p50"][i]
            ax.barh(row, value, left=left, color=colours[i], label=part if row == 0 else None)
            left += value
        ax.text(left + 0.03, row, f"{left:.2f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("ms, median of each part")
    ax.margins(x=0.12)
    ax.set_title("Where a scheduled job's lateness goes (p50 of each part)")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _footer(fig, data)
    return fig


def notify_budget(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 3.0))
    names = list(data["runs"])
    for row, name in enumerate(names):
        values = data["runs"][name]
        ax.scatter(values, [row] * len(values), color=COLOURS["trio"], s=30, zorder=3)
    ax.axvline(1.0, color="#d9822b", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0.9, 1.005)
    ax.set_xlabel("share of Telegram's 30 sends/s used at saturation, each dot a run (1.0: all)")
    ax.set_title(f"The notification budget ({data['date'][:10]})")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    _footer(fig, data)
    return fig


def lateness_distribution(data: dict[str, Any]) -> Any:
    plt = _style()
    panels = list(data["runs"])
    fig, axes = plt.subplots(1, len(panels), figsize=(8.2, 3.9), sharey=True)
    steps = data["percentile_steps"]
    for ax, panel in zip(axes, panels, strict=True):
        for side, values in data["runs"][panel].items():
            ax.plot([max(v, 0.05) for v in values], steps, label=side, color=COLOURS[side],
                    linewidth=1.8)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("lateness, ms (log scale)")
        ax.set_title(data["panels"][panel], fontsize=9)
        ax.axhline(99, color="#999999", linewidth=0.6, linestyle=":")
    axes[0].set_ylabel("% of jobs at most this late")
    axes[0].legend(frameon=False, fontsize=8, loc="lower right")
    fig.suptitle(f"Scheduled jobs: lateness of every job ({data['date'][:10]})", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _footer(fig, data)
    return fig


def notify_budget_over_time(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 3.6))
    shades = ["#2f6db5", "#8fb3e0"]
    for (name, series), colour in zip(data["series"].items(), shades, strict=False):
        xs = [(i + 1) * series["step_s"] for i in range(len(series["counts"]))]
        ax.step(xs, series["counts"], where="post", label=name, color=colour, linewidth=1.4)
    ax.axhline(data["budget"], color="#d9822b", linestyle="--", linewidth=1,
               label=f"Telegram's bound: {data['budget']} in any 1 s")  # fmt: skip
    ax.set_xlabel("seconds since the workers were ready")
    ax.set_ylabel("sends in the last second")
    ax.set_ylim(0, data["budget"] * 1.25)
    ax.set_title(f"The notification budget over a saturated run ({data['date'][:10]})")
    ax.legend(frameon=False, fontsize=8, loc="lower center")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _footer(fig, data)
    return fig


def soak_memory(data: dict[str, Any]) -> Any:
    plt = _style()
    fig, ax = plt.subplots(figsize=(8.2, 3.8))
    shades = ["#d9822b", "#8fb3e0", "#5b8fd0", "#2f6db5"]
    for (name, values), colour in zip(data["series"].items(), shades, strict=True):
        ax.plot(data["minutes"], values, marker="o", label=name, color=colour)
    ax.set_xlabel("minutes into the soak")
    ax.set_ylabel("RSS, MiB")
    ax.set_title("The service's memory under the soak")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _footer(fig, data)
    return fig


# figure file -> (data file, drawing)
FIGURES_FROM: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "headline.png": ("peers.json", headline),
    "peers.png": ("peers.json", peers),
    "transports.png": ("transports.json", transports),
    "lanes.png": ("lanes.json", lanes),
    "lateness_parts.png": ("lateness_parts.json", lateness_parts),
    "notify_budget.png": ("notify_budget.json", notify_budget),
    "soak_memory.png": ("soak_memory.json", soak_memory),
    "lateness_distribution.png": ("lateness_distribution.json", lateness_distribution),
    "notify_budget_over_time.png": ("notify_budget_over_time.json", notify_budget_over_time),
}


def stale() -> list[str]:
    """Figures missing, or drawn from data that has changed since."""
    out = []
    for figure, (source, _) in FIGURES_FROM.items():
        path = FIGURES / figure
        if not path.is_file() or png_text(path).get(KEY) != digest(DATA / source):
            out.append(figure)
    return out


def draw(figure: str) -> Path:
    source, make = FIGURES_FROM[figure]
    data = json.loads((DATA / source).read_text())
    fig = make(data)
    path = FIGURES / figure
    fig.savefig(path, metadata={KEY: digest(DATA / source), "Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only name stale figures")
    parser.add_argument("figures", nargs="*", help="only these (default: every one)")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"stale: docs/benchmarks/figures/{name} (python3 -m tools.bench_figures)")
        return 1 if names else 0
    FIGURES.mkdir(parents=True, exist_ok=True)
    for figure in args.figures or FIGURES_FROM:
        path = draw(figure)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
