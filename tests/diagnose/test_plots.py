"""diagnose/plots.py on constructed numbers: what the two figures draw (a marker and dash per
drafter, equal drafters side by side, the legend right of the data, the acceptance axis from 1
to the whole block, n and the steps beyond 1σ written under the axes)."""
from dataclasses import replace

import pytest

from tests.diagnose.test_report import checkpoint, gguf, report, v

pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")


def pv(*runs: float, positions=(1.0, 0.8, 0.5, 0.2)):
    return replace(v(*runs), per_position=list(positions))


def _trained_pair():
    """The checkpoint and two quantizations that keep exactly the same acceptance."""
    return report(checkpoint(reference=pv(3.4, 3.6)),
                  gguf("d-Q8_0.gguf", "Q8_0", conversion=pv(3.4, 3.6), runtime=pv(3.4, 3.6)),
                  gguf("d-Q4_K_M.gguf", "Q4_K_M", conversion=pv(3.4, 3.6), runtime=pv(3.4, 3.6)),
                  runs=2, prompts=3)


def _legend_texts_right_of(fig, axes):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert not any(ax.get_legend() for ax in axes)
    (leg,) = fig.legends
    assert all(leg.get_window_extent(r).x0 >= ax.get_window_extent(r).x1 for ax in axes)
    return [t.get_text() for t in leg.get_texts()]


def test_equal_quantizations_stay_visible_side_by_side():
    import matplotlib.pyplot as plt

    from dflash_gguf.diagnose.plots import figures

    figs = figures(_trained_pair())
    try:
        fig = figs["acceptance_by_position.png"]
        names = ["checkpoint", "d-Q8_0.gguf", "d-Q4_K_M.gguf"]
        panel = fig.axes[1]  # stage 2: the two GGUFs only
        lines = {ln.get_label(): ln for ln in panel.get_lines()}
        q8, q4 = lines["d-Q8_0.gguf"], lines["d-Q4_K_M.gguf"]
        assert list(q8.get_ydata()) == list(q4.get_ydata()) and list(q8.get_xdata()) != list(q4.get_xdata())
        assert (q8.get_marker(), q8.get_linestyle()) != (q4.get_marker(), q4.get_linestyle())
        assert panel.get_xlim()[0] <= 1 and panel.get_xlim()[1] >= 4 and panel.get_ylim()[1] >= 1
        assert _legend_texts_right_of(fig, fig.axes[:3]) == names
    finally:
        plt.close("all")


def test_waterfall_spans_one_to_the_block_and_says_n_and_the_verdict():
    import matplotlib.pyplot as plt

    from dflash_gguf.diagnose.plots import figures

    fig = figures(_trained_pair())["waterfall.png"]
    try:
        ax = fig.axes[0]
        lo, hi = ax.get_ylim()
        assert lo <= 1 and hi >= 5  # 4 draft positions + the target's token
        styles = {(ln.get_marker(), ln.get_linestyle()) for ln in ax.get_lines() if not ln.get_label().startswith("_")}
        assert len(styles) == 3
        assert _legend_texts_right_of(fig, [ax]) == ["checkpoint", "d-Q8_0.gguf", "d-Q4_K_M.gguf"]
        (note,) = [t.get_text() for t in fig.texts]
        assert "n=2 runs × 3 prompts" in note and "within noise" in note
    finally:
        plt.close("all")


def test_a_real_loss_is_named_under_the_waterfall():
    import matplotlib.pyplot as plt

    from dflash_gguf.diagnose.plots import figures

    r = report(checkpoint(reference=pv(3.4, 3.6)), gguf("bad.gguf", conversion=pv(1.1, 1.2)), runs=2, prompts=1)
    fig = figures(r)["waterfall.png"]
    try:
        assert "bad.gguf: stage 2 conversion -2.35" in fig.texts[0].get_text()
        assert "beyond 1σ" in fig.texts[0].get_text()
    finally:
        plt.close("all")


def test_write_plots_saves_both_small(tmp_path):
    from dflash_gguf.diagnose.plots import write_plots

    paths = write_plots(_trained_pair(), tmp_path)
    assert [p.name for p in paths] == ["waterfall.png", "acceptance_by_position.png"]
    assert all(0 < p.stat().st_size < 150_000 for p in paths)
