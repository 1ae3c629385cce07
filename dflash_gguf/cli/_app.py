"""The typer application object; command modules decorate it (one module per command group)."""
from __future__ import annotations

import typer

app = typer.Typer(
    name="dflash-gguf",
    help="Convert, quantize, check and verify DFlash speculative-decoding drafters as GGUF.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Convert, quantize, check and verify DFlash drafters as GGUF."""


@app.command("version")
def version() -> None:
    """Print the dflash-gguf version."""
    from .. import __version__

    typer.echo(__version__)
