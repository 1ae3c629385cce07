"""`python -m dflash_gguf ...` = the `dflash-gguf` command."""
from .cli import main

main()
