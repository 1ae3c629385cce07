"""Options that more than one command takes, with one spelling and help text each."""
from __future__ import annotations

from typing import Annotated

import typer

from ..formats import FORMATS

FormatOpt = Annotated[str, typer.Option("--format", "-f", help=f"Output flavour: {', '.join(FORMATS)}.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")]
