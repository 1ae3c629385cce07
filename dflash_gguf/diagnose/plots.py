"""PNG plots of a diagnose report (matplotlib, the ``plots`` extra, imported only here), one
question per figure, styled like bench's (``bench.plots``: a marker and dash per drafter,
equal lines side by side, legends right of the axes):

* ``waterfall.png``: at which stage a drafter loses acceptance: mean acceptance length at each
  stage, one line per drafter (error bars: sd over runs); every GGUF's line starts at the
  checkpoint's stage-1 value, so the step down is where it loses; the checkpoint's line is flat
  across stage 2 (no file there, nothing changes for it), marked only where measured;
  ``--expect`` as a dotted ceiling; n and the steps beyond 1σ written under the axes;
* ``acceptance_by_position.png``: where in the block each stage loses the target: acceptance
  at each draft position, one panel per stage, one line per drafter.
"""
from __future__ import annotations

from pathlib import Path

from ..bench.plots import footnote, legend_outside, offset, position_axes, pyplot, save_figures, series_style
from .report import STAGES, DiagnoseReport, number


def write_plots(report: DiagnoseReport, out_dir: str | Path) -> list[Path]:
    """Write the PNGs into ``out_dir`` (created); returns their paths.

    Raises:
        UsageError: matplotlib is not installed.
        OutputError: the directory cannot be created or written.
    """
    return save_figures(out_dir, lambda: figures(report))


def figures(report: DiagnoseReport) -> dict:
    """file name -> Figure, unsaved (the caller closes them)."""
    plt = pyplot()
    return {"waterfall.png": _waterfall(plt, report), "acceptance_by_position.png": _by_position(plt, report)}


def _measured(report: DiagnoseReport) -> list[str]:
    return [s for s in STAGES if any(s in x.values for x in report.lanes)]


def _style(i: int, lane) -> dict:
    st = series_style(i)
    if lane.is_checkpoint:
        st["color"] = "k"  # the reference every GGUF is read against
    return st


def _block(report: DiagnoseReport) -> int:
    """Draft positions per block, from the per-position data (the drafter's block minus one)."""
    return max([len(v.per_position) for x in report.lanes for v in x.values.values() if v.per_position] + [1])


def _n(report: DiagnoseReport) -> str:
    runs, prompts = report.settings.get("runs"), report.settings.get("prompts")
    return f"n={runs or '?'} runs × {prompts or '?'} prompts"


def _waterfall(plt, report: DiagnoseReport):
    stages = _measured(report)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * len(stages) + 2.5), 4.2))
    ck = report.checkpoint
    start = ck.values.get("reference") if ck is not None else None
    top = 0.0
    for i, lane in enumerate(report.lanes):
        pts = [(s, lane.values[s]) for s in stages if s in lane.values]
        if start is not None and not lane.is_checkpoint and pts:
            pts.insert(0, ("reference", start))  # the chain every GGUF starts from
        if not pts:
            continue
        line = list(pts)  # the points the line passes through; the markers stay on the measured ones
        if lane.is_checkpoint and "conversion" in stages and "reference" in lane.values and len(pts) > 1:
            line.insert(1, ("conversion", lane.values["reference"]))  # stage 2 changes nothing for it
        dx = offset(i, len(report.lanes))
        st = _style(i, lane)
        ax.plot([stages.index(s) + dx for s, _ in line], [v.mean_acceptance_length.mean for _, v in line],
                ms=5, lw=1.3, label=lane.name, zorder=3 if lane.is_checkpoint else 2,
                markevery=[k for k, pt in enumerate(line) if any(pt is q for q in pts)], **st)
        ax.errorbar([stages.index(s) + dx for s, _ in pts], [v.mean_acceptance_length.mean for _, v in pts],
                    yerr=[v.mean_acceptance_length.sd for _, v in pts], fmt="none", capsize=3, color=st["color"])
        top = max([top] + [v.mean_acceptance_length.mean + v.mean_acceptance_length.sd for _, v in pts])
    if report.expect is not None:
        ax.axhline(report.expect, color="grey", lw=0.9, ls=":", label=f"published value {report.expect:g}")
    ax.set_xticks(range(len(stages)), [f"{number(s)} {s}" for s in stages], rotation=15)
    if stages:
        ax.set_xlim(-0.5, len(stages) - 0.5)
    ax.set_ylabel("mean acceptance length (incl. the target's token)")
    ax.set_title("At which stage does each drafter lose acceptance?", fontsize=10)
    # 1 (nothing accepted) to the whole block plus the target's token: a small loss looks small
    ax.set_ylim(0.9, max(_block(report) + 1, top, report.expect or 0) + 0.1)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        legend_outside(fig, [ax], "drafter (± sd over runs)")
        real = [d for d in report.deltas() if d.real and d.delta < 0]
        footnote(fig, [f"{_n(report)}; a step counts beyond 1σ of the runs' spread"]
                 + [f"{d.drafter}: stage {number(d.stage)} {d.stage} {d.delta:+.2f} (σ {d.sigma:.2f}): beyond 1σ"
                    for d in real[:6]]
                 + ([f"… and {len(real) - 6} more"] if len(real) > 6 else [])
                 + ([] if real else ["no step down beyond 1σ: every change is within noise"]))
    else:
        ax.text(0.5, 0.5, "no stage measured", ha="center", va="center", transform=ax.transAxes)
        fig.tight_layout()
    return fig


def _by_position(plt, report: DiagnoseReport):
    stages = [s for s in _measured(report) if any(s in x.values and x.values[s].per_position for x in report.lanes)]
    cols = min(len(stages), 3) or 1
    rows = max(1, -(-len(stages) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    fig.suptitle("Where in the block does each stage lose the target?", fontsize=10)
    flat = [ax for line in axes for ax in line]
    n = len(report.lanes)
    for ax, s in zip(flat, stages):
        for i, lane in enumerate(report.lanes):
            v = lane.values.get(s)
            if v is None or not v.per_position:
                continue
            ax.plot([k + 1 + offset(i, n) for k in range(len(v.per_position))], v.per_position, ms=4, lw=1.2,
                    zorder=3 if lane.is_checkpoint else 2, label=lane.name, **_style(i, lane))
        position_axes(ax, f"stage {number(s)}: {s}", _block(report))
    for ax in flat[len(stages):]:
        ax.axis("off")
        if not stages:
            ax.text(0.5, 0.5, "no per-position data", ha="center", va="center", transform=ax.transAxes)
    legend_outside(fig, flat[:len(stages)], "drafter")
    return fig
