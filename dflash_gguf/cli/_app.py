"""The typer application object; command modules decorate it (one module per command group)."""
from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="dflash-gguf",
    help="Convert, quantize, check and verify DFlash speculative-decoding drafters as GGUF.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def package_version() -> str:
    """The installed distribution's version; the package's own ``__version__`` when it runs from a
    checkout that was never installed (no metadata)."""
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("dflash-gguf")
    except PackageNotFoundError:
        from .. import __version__

        return __version__


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"dflash-gguf {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[bool, typer.Option("--version", "-V", is_eager=True, callback=_print_version,
                                           help="Print 'dflash-gguf VERSION' and exit.")] = False,
) -> None:
    """Convert, quantize, check and verify DFlash drafters as GGUF."""


@app.command("version")
def version() -> None:
    """Print the dflash-gguf version."""
    typer.echo(package_version())
