"""Plots as inline SVG (matplotlib, the ``report`` extra): nothing is fetched when the page opens."""

from __future__ import annotations

import io
import re
from typing import Sequence

from mlharness.errors import ConfigError

MAX_POINTS = 4000  # points drawn in a scatter; more are thinned evenly
_PALETTE = {"ok": "#2b7a3d", "bad": "#c0392b", "line": "#1f4e79", "bound": "#b9770e"}


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("the HTML report draws its plots with matplotlib, which is not installed",
                          hint="pip install -e '.[report]'") from exc
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9,
                                "axes.spines.top": False, "axes.spines.right": False})
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:  # type: ignore[no-untyped-def]
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: inline SVG
    return re.sub(r'\s(width|height)="[\d.]+pt"', "", text, count=2)


def _thin(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    if len(xs) <= MAX_POINTS:
        return list(xs), list(ys)
    step = len(xs) / MAX_POINTS
    idx = [int(i * step) for i in range(MAX_POINTS)]
    return [xs[i] for i in idx], [ys[i] for i in idx]


def latency_histogram(latency_ms: Sequence[float], marks: dict[str, float]) -> str:
    """Histogram of per-query latencies with the reported percentiles as vertical lines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 2.6))
    ax.hist(latency_ms, bins=60, color=_PALETTE["line"], alpha=0.85)
    ax.set_yscale("log")  # the tail (a few slow queries) stays visible next to the bulk
    for label, value in marks.items():
        ax.axvline(value, color=_PALETTE["bound"], linestyle="--", linewidth=1)
        ax.annotate(label, (value, ax.get_ylim()[1] * 0.92), fontsize=7, rotation=90,
                    ha="right", va="top", color=_PALETTE["bound"])
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("queries (log)")
    ax.set_title(f"latency histogram ({len(latency_ms):,} samples)", fontsize=9)
    return _svg(fig)


def latency_over_time(issued_s: Sequence[float], latency_ms: Sequence[float]) -> str:
    plt = _pyplot()
    xs, ys = _thin(issued_s, latency_ms)
    fig, ax = plt.subplots(figsize=(5.2, 2.6))
    ax.scatter(xs, ys, s=5, color=_PALETTE["line"], alpha=0.6, linewidths=0)
    ax.set_xlabel("scheduled at (s since the first query)")
    ax.set_ylabel("latency (ms)")
    shown = "" if len(xs) == len(issued_s) else f", {len(xs):,} of {len(issued_s):,} shown"
    ax.set_title(f"latency over time{shown}", fontsize=9)
    return _svg(fig)


#: colours of the tune sessions' series (matplotlib's tab10 without its red and green)
_SERIES = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def tune_points(series: Sequence[tuple[str, Sequence[tuple[float, float, bool]]]],
                bound_ms: float | None, title: str, ylabel: str = "p99 latency (ms)",
                bound_label: str | None = None) -> str:
    """Server search: target QPS against p99 latency, one line per tune session (its points
    joined in QPS order, in the SVG as ``<g id="tune-series-N">``), VALID as dots and INVALID
    as crosses, and the latency bound (``bound_label``: its legend, default ``bound N ms``)."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    for i, (label, points) in enumerate(series):
        color = _SERIES[i % len(_SERIES)]
        ordered = sorted(points)
        (line,) = ax.plot([p[0] for p in ordered], [p[1] for p in ordered], color=color,
                          linewidth=1, label=label)
        line.set_gid(f"tune-series-{i}")
        for valid in (True, False):
            sel = [p for p in ordered if p[2] is valid]
            if sel:
                ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=28, zorder=3,
                           color=color, marker="o" if valid else "x")
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="#444444", marker="o", linestyle="", label="VALID"),
                Line2D([], [], color="#444444", marker="x", linestyle="", label="INVALID")]
    if bound_ms:
        handles.append(ax.axhline(bound_ms, color=_PALETTE["bound"], linestyle="--",
                                  linewidth=1.2, label=bound_label or f"bound {bound_ms:g} ms"))
    ax.set_xlabel("target QPS")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(handles=handles, fontsize=7, frameon=False)
    return _svg(fig)


def accuracy_bars(items: Sequence[tuple[str, float, float | None]]) -> str:
    """One bar per accuracy run (value in %) with its target as a tick."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 0.5 + 0.45 * len(items)))
    names = [i[0] for i in items]
    values = [i[1] for i in items]
    colors = [_PALETTE["ok"] if t is None or v >= t else _PALETTE["bad"] for _, v, t in items]
    ax.barh(names, values, color=colors, height=0.5)
    for y, (_, value, target) in enumerate(items):
        if target is not None:
            ax.plot([target, target], [y - 0.35, y + 0.35], color="black", linewidth=2)
        ax.annotate(f"{value:.3f}", (value, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)
    ax.set_xlabel("accuracy (%); black tick: target")
    ax.set_xlim(0, max(100.0, max(values) * 1.08))
    ax.invert_yaxis()
    return _svg(fig)
