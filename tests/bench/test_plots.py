"""bench/plots.py: the three PNGs of a bench report (matplotlib, the [plots] extra), their
panel layout, and the one-line errors when matplotlib is missing or the directory is unusable."""
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


def _report(suites=("s",)):
    d = ConfigResult("d", Path("d.gguf"), "u", n_draft=4)
    d.records = [replace(rec(r, p, 50, 0.25, drafted=8, accepted=5, steps=[(4, 3), (4, 2)]), suite=s)
                 for s in suites for r in (0, 1) for p in ("p0", "p1")]
    b = baseline()
    b.records = [replace(rec(r, p, 50, 0.5), suite=s) for s in suites for r in (0, 1) for p in ("p0", "p1")]
    return build_report(result(b, d))


def test_three_pngs_one_panel_per_suite_and_mode(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    from dflash_gguf.bench.plots import write_plots

    rep = _report()
    paths = write_plots(rep, tmp_path / "new" / "plots")
    assert [p.name for p in paths] == NAMES and rep.plots == [str(p) for p in paths]
    # figsize (5 * columns, 3.6 * rows) inches at 110 dpi: one group -> 550 x 396 px; the scatter is 7 x 4.8
    assert [_png_size(p) for p in paths] == [(550, 396), (550, 396), (770, 528)]
    four = _report(("a", "b", "c", "d"))
    paths = write_plots(four, tmp_path / "four")
    assert [_png_size(p) for p in paths][:2] == [(1650, 792)] * 2  # 3 columns, 2 rows


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
