"""The CLI's output helpers: one error line, untrusted names never parsed as markup."""
from __future__ import annotations

from dflash_gguf.cli._common import err, error_line, esc, out
from dflash_gguf.errors import GGUFFormatError


def test_error_line_escapes_control_characters(capsys):
    # A corrupt architecture string ("ll\x00ma") ends up inside messages; the line must stay one line.
    error_line(GGUFFormatError("t.gguf: ll\x00ma.embedding_length is missing\nsecond line"))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["error: t.gguf: ll\\x00ma.embedding_length is missing\\nsecond line"]


def test_esc_keeps_markup_like_names_literal(capsys):
    out.print(f"[bold]{esc('[/]')}[/bold] {esc('[red]x[/blue]')}")
    assert capsys.readouterr().out.strip() == "[/] [red]x[/blue]"
    assert err is not out


def test_plain_lines_on_a_pipe_are_written_as_they_are(capsys, monkeypatch):
    from dflash_gguf.cli._common import _Stream

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    s = _Stream(stderr=False)
    s.print("wrote /m/:fire:/[b]x[/b].gguf\rtail", markup=False)
    s.lead("wrote", "bold green", "/m/:fire:/[b]x[/b].gguf")
    # no emoji code replaced, no markup parsed, a carriage return dropped (as rich drops it)
    assert capsys.readouterr().out == "wrote /m/:fire:/[b]x[/b].gguftail\nwrote /m/:fire:/[b]x[/b].gguf\n"
    assert s._console is None  # rich was never needed
    assert not s.is_terminal
    # the same bytes rich's own Console writes to a pipe
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, highlight=False, soft_wrap=True, emoji=False, width=200).print(
        "wrote /m/:fire:/[b]x[/b].gguf\rtail\x07 \x1b[0m done", markup=False)
    s.print("wrote /m/:fire:/[b]x[/b].gguf\rtail\x07 \x1b[0m done", markup=False)
    assert capsys.readouterr().out == buf.getvalue()


def test_a_forced_terminal_goes_through_rich(capsys, monkeypatch):
    from dflash_gguf.cli._common import _Stream

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    s = _Stream(stderr=False)
    s.lead("wrote", "bold green", "/m/:fire:/[b]x[/b].gguf")
    text = capsys.readouterr().out
    assert "\x1b[" in text and "wrote" in text and "/m/:fire:/[b]x[/b].gguf" in text  # styled; path literal
    assert s._console is not None and s.is_terminal
