"""bench/plots.py: the three PNGs of a bench report (matplotlib, the [plots] extra), what they
draw (styles, offsets, legends outside the data, axes that include the baseline, n and the 1σ
verdict), and the one-line errors when matplotlib is missing or the directory is unusable."""
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_gguf.bench.report import build_report
from dflash_gguf.bench.run import ConfigResult
from tests.bench.test_report import baseline, rec, result

NAMES = ["acceptance_by_position.png", "accept_length_histogram.png", "speedup_vs_acceptance.png"]


def test_plots_without_matplotlib_is_a_one_line_usage_error(monkeypatch):
    import builtins

    from dflash_gguf.bench import plots
    from dflash_gguf.errors import UsageError

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",
                        lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name == "matplotlib"
                        else real(name, *a, **k))
    with pytest.raises(UsageError, match=r"pip install 'dflash-gguf\[plots\]'"):
        plots.require_matplotlib()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _drafter(name, suites=("s",), fast=0.25):
    d = ConfigResult(name, Path(f"{name}.gguf"), "u", n_draft=4)
    d.records = [replace(rec(r, p, 50, fast, drafted=8, accepted=5, steps=[(4, 3), (4, 2)]), suite=s)
                 for s in suites for r in (0, 1) for p in ("p0", "p1")]
    return d


def _report(suites=("s",), drafters=("d",)):
    b = baseline()
    b.records = [replace(rec(r, p, 50, 0.5), suite=s) for s in suites for r in (0, 1) for p in ("p0", "p1")]
    return build_report(result(b, *[_drafter(n, suites) for n in drafters]))


def _legend_clear_of(fig, axes):
    """The figure's legend lies right of every axes' data area (display coordinates)."""
    r = fig.canvas.get_renderer()
    fig.canvas.draw()
    assert not any(ax.get_legend() for ax in axes)
    (leg,) = fig.legends
    box = leg.get_window_extent(r)
    assert all(box.x0 >= ax.get_window_extent(r).x1 for ax in axes)
    return [t.get_text() for t in leg.get_texts()]


def test_three_pngs_small_and_framed_whole(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    from dflash_gguf.bench.plots import write_plots

    rep = _report()
    paths = write_plots(rep, tmp_path / "new" / "plots")
    assert [p.name for p in paths] == NAMES and rep.plots == [str(p) for p in paths]
    assert all(p.stat().st_size < 150_000 for p in paths)
    w, h = _png_size(paths[0])
    assert 400 < w < 900 and 250 < h < 500  # one panel plus the legend beside it, at 100 dpi
    four = write_plots(_report(("a", "b", "c", "d")), tmp_path / "four")
    assert _png_size(four[0])[1] > 1.7 * h  # 3 columns, 2 rows


def test_equal_drafters_stay_apart_each_with_its_own_marker_and_dash():
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    import matplotlib.pyplot as plt

    from dflash_gguf.bench.plots import figures

    figs = figures(_report(drafters=("Q8_0", "Q4_K_M")))  # the same numbers: the lines would coincide
    try:
        fig = figs["acceptance_by_position.png"]
        ax = fig.axes[0]
        lines = [c.lines[0] for c in ax.containers]
        assert [ln.get_label() for ln in ax.containers] == ["Q8_0", "Q4_K_M"]
        assert len({(ln.get_marker(), ln.get_linestyle()) for ln in lines}) == 2
        xs = [list(ln.get_xdata()) for ln in lines]
        assert xs[0] != xs[1] and all(abs(a - b) < 0.2 for a, b in zip(*xs))  # side by side, same position
        assert list(lines[0].get_ydata()) == list(lines[1].get_ydata())
        assert ax.get_xlim()[0] <= 1 and ax.get_xlim()[1] >= 4 and ax.get_ylim() == pytest.approx((0, 1.05))
        assert _legend_clear_of(fig, [ax]) == ["Q8_0", "Q4_K_M"]
        hist = figs["accept_length_histogram.png"]
        assert _legend_clear_of(hist, hist.axes[:1]) == ["Q8_0", "Q4_K_M"]
    finally:
        plt.close("all")


def test_speedup_axes_include_the_baseline_and_the_block_and_say_n_and_the_verdict():
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    import matplotlib.pyplot as plt

    from dflash_gguf.bench.plots import figures

    b = baseline()
    noisy = _drafter("d")
    noisy.records = [rec(r, p, 50, secs, drafted=8, accepted=5, steps=[(4, 3), (4, 2)])
                     for r, secs in ((0, 0.2), (1, 0.9)) for p in ("p0", "p1")]
    fig = figures(build_report(result(b, noisy)))["speedup_vs_acceptance.png"]
    try:
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        assert lo <= 1 and hi >= 5  # 1 (nothing accepted) to the whole block: n_draft 4 + the target's token
        assert ax.get_ylim()[0] <= 1 <= ax.get_ylim()[1]
        labels = _legend_clear_of(fig, [ax])
        assert labels == ["baseline speed (1.0×)", "d"]  # every entry says what it is: no bare suite · mode
        (note,) = [t.get_text() for t in fig.texts]
        assert note.startswith("d: speed-up ") and "n=2 runs × 2 prompts: within noise" in note
    finally:
        plt.close("all")


def test_two_groups_name_the_suite_and_mode_in_every_entry():
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    import matplotlib.pyplot as plt

    from dflash_gguf.bench.plots import figures

    fig = figures(_report(("a", "b")))["speedup_vs_acceptance.png"]
    try:
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert labels == ["baseline speed (1.0×)", "d, suite a, raw mode", "d, suite b, raw mode"]
        assert "faster beyond 1σ" in fig.texts[0].get_text()
    finally:
        plt.close("all")


def test_a_report_without_drafting_still_gets_its_pngs(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    from dflash_gguf.bench.plots import write_plots

    rep = build_report(result(baseline()))
    paths = write_plots(rep, tmp_path)
    assert [p.name for p in paths] == NAMES and all(p.stat().st_size > 0 for p in paths)


def test_an_unusable_directory_is_an_output_error(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    from dflash_gguf.bench.plots import write_plots
    from dflash_gguf.errors import OutputError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=r"--plots .*file: cannot create it"):
        write_plots(_report(), blocker)
