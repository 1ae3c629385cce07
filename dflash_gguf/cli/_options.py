"""Options that more than one command takes, with one spelling and help text each."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

OutfileOpt = Annotated[Optional[Path], typer.Option("-o", "--outfile", help="Output GGUF path.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")]
ServerArgsOpt = Annotated[Optional[str], typer.Option("--server-args", help="Extra llama-server flags, e.g. \"-ngl 99 -fa on\".")]


def __getattr__(name: str):
    """``FormatOpt``, built when convert or retarget imports it: its help names the formats, and
    importing formats/ (and config/) costs ~40 ms that the other commands need not pay."""
    if name != "FormatOpt":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..formats import FORMATS

    return Annotated[str, typer.Option("--format", "-f", help=f"Output flavour: {', '.join(FORMATS)}.")]


# The prompts of the commands that run the torch reference (parity, diagnose): token ids, text
# through the target's tokenizer, or a JSONL file (the format bench --suite reads).
PromptIdsOpt = Annotated[Optional[str], typer.Option("--prompt-ids", help="Comma-separated token ids, e.g. 1,2,3.")]
PromptOpt = Annotated[Optional[str], typer.Option("--prompt", help="Prompt text (tokenized with the target's tokenizer).")]
PromptsFileOpt = Annotated[Optional[Path], typer.Option("--prompts-file", help="JSONL: {\"prompt\": ...} or {\"prompt_ids\": [...]} per line.")]
# The target of the torch reference (parity, diagnose): built in, or through transformers.
TargetBackendOpt = Annotated[str, typer.Option("--target-backend", help="native (Qwen3/Llama, built in) | transformers (any HF causal LM; the 'hf' extra).")]
DeviceMapOpt = Annotated[Optional[str], typer.Option("--device-map", help="With --target-backend transformers: auto | balanced | sequential: accelerate spreads the target over every GPU, then CPU memory (--device is the drafter's).")]
TokenizerDirOpt = Annotated[Optional[Path], typer.Option("--tokenizer-dir", help="Where tokenizer.json / tokenizer.model live (default: --target).")]


def resolve_drafter_and_target(drafter: Path, target: Path) -> tuple[Path, Path]:
    """parity's and diagnose's --drafter and --target: a Hugging Face repo id (ORG/NAME[@REV]) becomes
    its cached snapshot, downloaded if need be; a local path (a GGUF target too) stays as typed
    (docs/hub.md). The drafter first: a typo in it should not cost a download of the target's weights."""
    from ..hub import DRAFTER_FILES, TARGET_FILES, resolve_dir

    drafter = resolve_dir(drafter, flag="--drafter", allow_patterns=DRAFTER_FILES)
    return drafter, resolve_dir(target, flag="--target", allow_patterns=TARGET_FILES)


def check_prompt_options(prompt_ids: str | None, prompt: str | None, prompts_file: Path | None) -> list[list[int]] | None:
    """Exactly one prompt source; ``--prompt-ids`` parsed (None for the other two, which need the
    tokenizer: ``read_prompts``). Raises UsageError."""
    from ..errors import UsageError

    if sum(x is not None for x in (prompt_ids, prompt, prompts_file)) != 1:
        raise UsageError("give exactly one of --prompt-ids, --prompt, --prompts-file")
    if prompt_ids is None:
        return None
    try:
        return [[int(t) for t in prompt_ids.replace(" ", "").split(",") if t]]
    except ValueError:
        raise UsageError(f"--prompt-ids {prompt_ids!r}: expected comma-separated integers") from None


def read_prompts(prompt_ids: str | None, prompt: str | None, prompts_file: Path | None, target: Path,
                 tokenizer_dir: Path | None) -> list[list[int]]:
    """The prompts as token ids, whichever option gave them."""
    from ..parity.prompts import read_prompts_file, tokenize

    ids = check_prompt_options(prompt_ids, prompt, prompts_file)
    if ids is not None:
        return ids
    if prompt is not None:
        return [tokenize(prompt, target, tokenizer_dir)]
    return read_prompts_file(prompts_file, target, tokenizer_dir)


def split_server_args(text: str | None) -> tuple[str, ...]:
    """--server-args split as a shell would. Raises UsageError on an unbalanced quote."""
    import shlex

    from ..errors import UsageError

    try:
        return tuple(shlex.split(text or ""))
    except ValueError as exc:  # an unbalanced quote or a trailing backslash
        raise UsageError(f"--server-args {text!r}: cannot split it into flags ({exc}); "
                         "quote as in a shell, e.g. \"-ngl 99 -fa on\"") from None
