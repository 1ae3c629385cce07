"""PNG plots of a bench report (matplotlib, the ``plots`` extra, imported only here), one
question per figure:

* ``acceptance_by_position.png``: how far into the block each drafter keeps the target's
  tokens, one line per drafter (error bars: sd over runs), one panel per suite and mode;
* ``accept_length_histogram.png``: how often a step accepts exactly k drafts, per drafter;
* ``speedup_vs_acceptance.png``: whether more acceptance buys speed: speed-up over the
  baseline against mean acceptance length, one point per configuration, with n and the 1σ
  verdict of each speed-up written under the axes.

The styling shared with diagnose's plots lives here: ``series_style`` (a marker and dash per
series, so lines stay apart without colour), ``offset`` (identical series side by side, not on
top of each other), ``legend_outside`` and ``save``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .._lazy import require
from ..errors import OutputError
from ..metrics.spread import Stat, beyond_sigma
from .report import BenchReport, Row

DPI = 100  # each PNG well under 150 KB (the docs embed them)
MARKERS = "osD^v<>ph*"
DASHES = ["-", "--", "-.", ":"]  # with 10 markers: 20 distinct (marker, dash) pairs


def require_matplotlib() -> None:
    """Raises UsageError when matplotlib is missing (checked before a long run, not after)."""
    require("matplotlib", "--plots", "plots", alternative="or drop --plots")


def pyplot():
    """pyplot on the file-only Agg backend. Raises UsageError when matplotlib is missing."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def plot_dir(out_dir: str | Path):
    """(pyplot, ``out_dir`` created) for a command's --plots.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created.
    """
    plt = pyplot()
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--plots {d}: cannot create it ({exc.strerror})") from None
    return plt, d


def series_style(i: int) -> dict:
    """Colour, marker and dash of series ``i``: no two of the first 20 share (marker, dash)."""
    return {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "ls": DASHES[i % len(DASHES)]}


def offset(i: int, n: int, step: float = 0.07) -> float:
    """Horizontal shift of series ``i`` of ``n``, centred on 0: equal series stay side by side."""
    return (i - (n - 1) / 2) * step


def legend_outside(fig, axes, title: str | None = None) -> None:
    """One legend for the figure, right of all its axes (never over the data); entries by label."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    if not seen:
        return
    fig.tight_layout()  # place the axes first: the legend anchors to where they end
    right = max(ax.get_position().x1 for ax in axes)
    top = max(ax.get_position().y1 for ax in axes)
    fig.legend(list(seen.values()), list(seen), loc="upper left", bbox_to_anchor=(right + 0.01, top),
               fontsize=7, title=title, title_fontsize=7, frameon=False)


def footnote(fig, lines: list[str]) -> None:
    """Text under the axes (n, verdicts): on the figure, never over the data."""
    if lines:
        fig.text(0.01, -0.01, "\n".join(lines), ha="left", va="top", fontsize=7)


def save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # tight: the outside legend and footnote stay in
    return path


def write_plots(report: BenchReport, out_dir: str | Path) -> list[Path]:
    """Write the PNGs into ``out_dir`` (created); returns their paths.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created or written.
    """
    paths = save_figures(out_dir, lambda: figures(report))
    report.plots = [str(p) for p in paths]
    return paths


def save_figures(out_dir: str | Path, make: Callable[[], dict]) -> list[Path]:
    """``make()``'s {file name: Figure} saved into ``out_dir`` (created); bench's and diagnose's
    --plots. ``make`` runs after matplotlib is set up (Agg), and every figure is closed after.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created or written.
    """
    plt, d = plot_dir(out_dir)
    try:
        return [save(fig, d / name) for name, fig in make().items()]
    except OSError as exc:
        raise OutputError(f"--plots {d}: cannot write ({exc.strerror})") from None
    finally:
        plt.close("all")


def figures(report: BenchReport) -> dict:
    """file name -> Figure, unsaved (the caller closes them)."""
    plt = pyplot()
    drafted = [r for r in report.rows if r.source is not None]
    groups = sorted({(r.suite, r.mode) for r in drafted})
    return {"acceptance_by_position.png": _by_position(plt, drafted, groups),
            "accept_length_histogram.png": _histogram(plt, drafted, groups),
            "speedup_vs_acceptance.png": _speedup(plt, report)}


def position_axes(ax, title: str, width: int) -> None:
    """An acceptance-by-draft-position panel's axes (bench's and diagnose's plots): the whole
    block 1..width and the whole 0..1 share, so panels compare at a glance."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("draft position in the block")
    ax.set_ylabel("share of steps accepting it")
    ax.set_xlim(0.5, max(width, 1) + 0.5)
    ax.set_xticks(range(1, max(width, 1) + 1, max(1, width // 8)))
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)


def _panels(plt, n: int, title: str):
    cols = min(n, 3) or 1
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    fig.suptitle(title, fontsize=10)
    return fig, [ax for line in axes for ax in line]


def _by_position(plt, rows: list[Row], groups):
    fig, axes = _panels(plt, len(groups), "How far into the block each drafter keeps the target's tokens")
    for ax, (suite, mode) in zip(axes, groups):
        rs = [r for r in rows if (r.suite, r.mode) == (suite, mode) and r.per_position]
        for i, r in enumerate(rs):
            xs = [k + 1 + offset(i, len(rs)) for k in range(len(r.per_position))]
            ax.errorbar(xs, [s.mean for s in r.per_position], yerr=[s.sd for s in r.per_position],
                        ms=4, capsize=2, lw=1.2, label=r.config, **series_style(i))
        position_axes(ax, f"suite {suite}, {mode} mode", max((len(r.per_position) for r in rs), default=1))
    _blank(axes[len(groups):], "no per-position data" if not groups else "")
    legend_outside(fig, axes[:len(groups)], "drafter (± sd over runs)")
    return fig


def _histogram(plt, rows: list[Row], groups):
    fig, axes = _panels(plt, len(groups), "How many drafts a step accepts")
    for ax, (suite, mode) in zip(axes, groups):
        rs = [r for r in rows if (r.suite, r.mode) == (suite, mode) and r.histogram]
        width = 0.8 / max(len(rs), 1)
        for j, r in enumerate(rs):
            total = sum(r.histogram) or 1
            st = series_style(j)
            ax.bar([k + offset(j, len(rs), width) for k in range(len(r.histogram))],
                   [n / total for n in r.histogram], width=width, color=st["color"],
                   hatch=["", "//", "..", "xx"][j % 4], edgecolor="white", lw=0.3, label=r.config)
        ax.set_title(f"suite {suite}, {mode} mode", fontsize=9)
        ax.set_xlabel("drafts accepted in a step")
        ax.set_ylabel("share of steps")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3, axis="y")
    _blank(axes[len(groups):], "no histogram data" if not groups else "")
    legend_outside(fig, axes[:len(groups)], "drafter")
    return fig


def _prompts(report: BenchReport, r: Row) -> int:
    c = next((c for c in report.result.configs if c.name == r.config), None)
    return len({q.prompt_id for q in c.records if (q.suite, q.mode) == (r.suite, r.mode)}) if c else 0


def verdict(report: BenchReport, r: Row) -> str:
    """"<config>: speed-up 1.08 ± 0.65, n=2 runs × 4 prompts: within noise" (1σ of the
    difference: this row's spread and the baseline's)."""
    base = next((b for b in report.rows if b.config == "baseline" and (b.suite, b.mode) == (r.suite, r.mode)), None)
    rel = base.tokens_per_s.sd / base.tokens_per_s.mean if base and base.tokens_per_s.mean else 0.0
    d = beyond_sigma(Stat(1.0, rel, []), r.speedup)
    word = ("within noise" if not d["real"] else "faster beyond 1σ" if d["delta"] > 0 else "slower beyond 1σ")
    return (f"{r.config}: speed-up {r.speedup.mean:.2f} ± {d['sigma']:.2f}, "
            f"n={len(r.runs)} runs × {_prompts(report, r)} prompts: {word}")


def _speedup(plt, report: BenchReport):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    pts = [r for r in report.rows if r.speedup is not None and r.mean_length is not None]
    configs = list(dict.fromkeys(r.config for r in pts))
    groups = list(dict.fromkeys((r.suite, r.mode) for r in pts))
    # the largest acceptance length possible: the whole block plus the target's own token
    block = max([c.n_draft + 1 for c in report.result.configs if c.n_draft]
                + [len(r.per_position) + 1 for r in pts if r.per_position] + [2])
    shift = 0.012 * block  # equal points side by side
    for r in pts:
        i = configs.index(r.config)
        st = series_style(i)
        if len(groups) > 1:  # the marker tells the group; colour and legend entry the configuration
            st["marker"] = MARKERS[groups.index((r.suite, r.mode)) % len(MARKERS)]
        label = r.config if len(groups) == 1 else f"{r.config}, suite {r.suite}, {r.mode} mode"
        ax.errorbar(r.mean_length.mean + offset(i, len(configs), shift), r.speedup.mean, xerr=r.mean_length.sd,
                    yerr=r.speedup.sd, capsize=3, ms=7, color=st["color"], marker=st["marker"], ls="none",
                    label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="baseline speed (1.0×)")
    ax.set_xlabel("mean acceptance length (tokens per verification, incl. the target's own)")
    ax.set_ylabel("speed-up over the no-draft baseline")
    where = f" (suite {groups[0][0]}, {groups[0][1]} mode)" if len(groups) == 1 else ""
    ax.set_title(f"Does more acceptance buy speed?{where}", fontsize=10)
    ax.set_xlim(0.8, block + 0.2)  # 1 (nothing accepted) to the whole block: never zoomed on one value
    lo = min([1.0] + [r.speedup.mean - r.speedup.sd for r in pts])
    hi = max([1.0] + [r.speedup.mean + r.speedup.sd for r in pts])
    pad = 0.1 * max(hi - lo, 0.5)
    ax.set_ylim(max(0.0, lo - pad), hi + pad)
    ax.grid(alpha=0.3)
    if pts:
        legend_outside(fig, [ax], "configuration (± sd over runs)")
        footnote(fig, [verdict(report, r) + ("" if len(groups) == 1 else f" (suite {r.suite}, {r.mode} mode)")
                       for r in pts])
    else:
        ax.text(0.5, 0.5, "no baseline or no drafting: nothing to plot", ha="center", va="center",
                transform=ax.transAxes)
        fig.tight_layout()
    return fig


def _blank(axes, text: str) -> None:
    for ax in axes:
        ax.axis("off")
        if text:
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
