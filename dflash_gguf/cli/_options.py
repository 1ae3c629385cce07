"""Options that more than one command takes, with one spelling and help text each."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..formats import FORMATS

OutfileOpt = Annotated[Optional[Path], typer.Option("-o", "--outfile", help="Output GGUF path.")]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help=f"Output flavour: {', '.join(FORMATS)}.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")]
