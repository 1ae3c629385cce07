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
