"""PNG plots of a bench report (matplotlib, the ``plots`` extra, imported only here):

* ``acceptance_by_position.png``: acceptance at each draft position, one line per drafter
  (error bars: sd over runs), one panel per suite and mode: where a drafter loses the target;
* ``speedup_vs_acceptance.png``: speed-up over the baseline against mean acceptance length,
  one point per configuration (error bars both ways): whether more acceptance buys speed;
* ``accept_length_histogram.png``: share of steps accepting exactly k drafts, per drafter.
"""
from __future__ import annotations

from pathlib import Path

from .._lazy import require
from ..errors import OutputError
from .report import BenchReport, Row


def require_matplotlib() -> None:
    """Raises UsageError when matplotlib is missing (checked before a long run, not after)."""
    require("matplotlib", "--plots", "plots", alternative="or drop --plots")


def plot_dir(out_dir: str | Path):
    """(pyplot on the file-only Agg backend, ``out_dir`` created) for a command's --plots.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--plots {d}: cannot create it ({exc.strerror})") from None
    return plt, d


def write_plots(report: BenchReport, out_dir: str | Path) -> list[Path]:
    """Write the PNGs into ``out_dir`` (created); returns their paths.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created or written.
    """
    plt, d = plot_dir(out_dir)
    drafted = [r for r in report.rows if r.source is not None]
    groups = sorted({(r.suite, r.mode) for r in drafted})
    paths = []
    try:
        paths.append(_by_position(plt, drafted, groups, d / "acceptance_by_position.png"))
        paths.append(_histogram(plt, drafted, groups, d / "accept_length_histogram.png"))
        paths.append(_speedup(plt, report.rows, d / "speedup_vs_acceptance.png"))
    except OSError as exc:
        raise OutputError(f"--plots {d}: cannot write ({exc.strerror})") from None
    finally:
        plt.close("all")
    report.plots = [str(p) for p in paths]
    return paths


def position_axes(ax, title: str) -> None:
    """An acceptance-by-draft-position panel's axes (bench's and diagnose's plots)."""
    ax.set_title(title)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _panels(plt, n: int, title: str):
    cols = min(n, 3) or 1
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    fig.suptitle(title)
    return fig, [ax for line in axes for ax in line]


def _by_position(plt, rows: list[Row], groups, path: Path) -> Path:
    fig, axes = _panels(plt, len(groups), "Acceptance by draft position (share of steps reaching it)")
    for ax, (suite, mode) in zip(axes, groups):
        for r in (r for r in rows if (r.suite, r.mode) == (suite, mode) and r.per_position):
            xs = list(range(1, len(r.per_position) + 1))
            ax.errorbar(xs, [s.mean for s in r.per_position], yerr=[s.sd for s in r.per_position],
                        marker="o", ms=3, capsize=2, label=r.config)
        position_axes(ax, f"{suite} · {mode}")
    _blank(axes[len(groups):], "no per-position data" if not groups else "")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _histogram(plt, rows: list[Row], groups, path: Path) -> Path:
    fig, axes = _panels(plt, len(groups), "Accepted drafts per step (share of steps)")
    for ax, (suite, mode) in zip(axes, groups):
        rs = [r for r in rows if (r.suite, r.mode) == (suite, mode) and r.histogram]
        width = 0.8 / max(len(rs), 1)
        for j, r in enumerate(rs):
            total = sum(r.histogram) or 1
            ax.bar([k + j * width for k in range(len(r.histogram))], [n / total for n in r.histogram],
                   width=width, label=r.config)
        ax.set_title(f"{suite} · {mode}")
        ax.set_xlabel("drafts accepted in a step")
        ax.set_ylabel("share of steps")
        ax.grid(alpha=0.3, axis="y")
        if rs:
            ax.legend(fontsize=7)
    _blank(axes[len(groups):], "no histogram data" if not groups else "")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _speedup(plt, rows: list[Row], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.8))
    pts = [r for r in rows if r.speedup is not None and r.mean_length is not None]
    # colour = configuration, marker = suite · mode: a legend reads better than labels that overlap
    colours = {c: f"C{i % 10}" for i, c in enumerate(dict.fromkeys(r.config for r in pts))}
    markers = {g: "osD^v<>ph*"[i % 10] for i, g in enumerate(dict.fromkeys((r.suite, r.mode) for r in pts))}
    for r in pts:
        ax.errorbar(r.mean_length.mean, r.speedup.mean, xerr=r.mean_length.sd, yerr=r.speedup.sd, capsize=3,
                    color=colours[r.config], marker=markers[(r.suite, r.mode)], ms=7, ls="none")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="none", label=name) for name, c in colours.items()]
    handles += [plt.Line2D([], [], color="grey", marker=m, ls="none", label=f"{s} · {mo}")
                for (s, mo), m in markers.items()]
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("mean acceptance length (tokens per verification, incl. the target's own)")
    ax.set_ylabel("speed-up vs no-draft baseline (decode tok/s)")
    ax.set_title("Speed-up vs acceptance")
    ax.grid(alpha=0.3)
    if pts:
        ax.legend(handles=handles, fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no baseline or no drafting: nothing to plot", ha="center", va="center",
                transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _blank(axes, text: str) -> None:
    for ax in axes:
        ax.axis("off")
        if text:
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
