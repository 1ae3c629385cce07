"""PNG plots of a diagnose report (matplotlib, the ``plots`` extra, imported only here):

* ``waterfall.png``: mean acceptance length at each stage, one line per drafter (error bars:
  sd over runs); every GGUF's line starts at the checkpoint's stage-1 value, so the step down
  is where it loses; the checkpoint's line is flat across stage 2 (no file there, nothing
  changes for it), marked only where measured; ``--expect`` as a dotted ceiling;
* ``acceptance_by_position.png``: acceptance at each draft position, one panel per stage, one
  line per drafter: where in the block a stage loses the target.
"""
from __future__ import annotations

from pathlib import Path

from ..bench.plots import plot_dir, position_axes
from ..errors import OutputError
from .report import STAGES, DiagnoseReport, number

DPI = 90  # each PNG well under 150 KB with five drafters and five stages (the docs embed them)


def require_matplotlib() -> None:
    """Raises UsageError when matplotlib is missing (checked before the stages run, not after)."""
    from ..bench.plots import require_matplotlib as bench_requires

    bench_requires()  # the one place that message is worded


def write_plots(report: DiagnoseReport, out_dir: str | Path) -> list[Path]:
    """Write the PNGs into ``out_dir`` (created); returns their paths.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created or written.
    """
    plt, d = plot_dir(out_dir)
    try:
        return [_waterfall(plt, report, d / "waterfall.png"), _by_position(plt, report, d / "acceptance_by_position.png")]
    except OSError as exc:
        raise OutputError(f"--plots {d}: cannot write ({exc.strerror})") from None
    finally:
        plt.close("all")


def _measured(report: DiagnoseReport) -> list[str]:
    return [s for s in STAGES if any(s in x.values for x in report.lanes)]


def _waterfall(plt, report: DiagnoseReport, path: Path) -> Path:
    stages = _measured(report)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(stages) + 3), 4.8))
    ck = report.checkpoint
    start = ck.values.get("reference") if ck is not None else None
    for i, lane in enumerate(report.lanes):
        pts = [(s, lane.values[s]) for s in stages if s in lane.values]
        if start is not None and not lane.is_checkpoint and pts:
            pts.insert(0, ("reference", start))  # the chain every GGUF starts from
        if not pts:
            continue
        line = list(pts)  # the points the line passes through; the markers stay on the measured ones
        if lane.is_checkpoint and "conversion" in stages and "reference" in lane.values and len(pts) > 1:
            line.insert(1, ("conversion", lane.values["reference"]))  # stage 2 changes nothing for it
        # the checkpoint black and on top: a GGUF that keeps its acceptance would hide it otherwise
        color = "k" if lane.is_checkpoint else f"C{i % 10}"
        ax.plot([stages.index(s) for s, _ in line], [v.mean_acceptance_length.mean for _, v in line], color=color,
                ls="--" if lane.is_checkpoint else "-", marker="o", ms=4, label=lane.name,
                zorder=3 if lane.is_checkpoint else 2,
                markevery=[k for k, pt in enumerate(line) if any(pt is q for q in pts)])
        ax.errorbar([stages.index(s) for s, _ in pts], [v.mean_acceptance_length.mean for _, v in pts],
                    yerr=[v.mean_acceptance_length.sd for _, v in pts], fmt="none", capsize=3, color=color)
    if report.expect is not None:
        ax.axhline(report.expect, color="grey", lw=0.9, ls=":", label=f"published {report.expect:g}")
    ax.set_xticks(range(len(stages)), [f"{number(s)} {s}" for s in stages], rotation=15)
    ax.set_ylabel("mean acceptance length (incl. the target's token)")
    ax.set_title("Acceptance by stage: where it is lost")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no stage measured", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def _by_position(plt, report: DiagnoseReport, path: Path) -> Path:
    stages = [s for s in _measured(report) if any(s in x.values and x.values[s].per_position for x in report.lanes)]
    cols = min(len(stages), 3) or 1
    rows = max(1, -(-len(stages) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    fig.suptitle("Acceptance by draft position (share of rounds reaching it), per stage")
    flat = [ax for line in axes for ax in line]
    for ax, s in zip(flat, stages):
        for i, lane in enumerate(report.lanes):
            v = lane.values.get(s)
            if v is None or not v.per_position:
                continue
            ax.plot(range(1, len(v.per_position) + 1), v.per_position, marker="o", ms=3,
                    color="k" if lane.is_checkpoint else f"C{i % 10}", ls="--" if lane.is_checkpoint else "-",
                    zorder=3 if lane.is_checkpoint else 2, label=lane.name)
        position_axes(ax, f"stage {number(s)}: {s}")
    for ax in flat[len(stages):]:
        ax.axis("off")
        if not stages:
            ax.text(0.5, 0.5, "no per-position data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path
