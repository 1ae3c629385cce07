"""The target model: its tokenizer as GGUF vocab keys, and what the drafter needs to know of it.

One concern per module:

* ``info``: ``TargetInfo`` and how to get one (``load_target``, ``target_from_gguf``,
  ``target_from_hf_dir``); pairing checks (``check_drafter_fits``).
* ``hf_vocab``: SentencePiece and BPE vocabularies rebuilt from a Hugging Face dir.
* ``pretokenizer``: choosing ``tokenizer.ggml.pre`` (``chkhsh``: llama.cpp's table).
* ``special_vocab``: merges, special token ids, add_bos/add_eos, chat templates.
* ``keys``, ``hf_files``: GGUF key spellings; reading the HF JSON files.

The library never prints: anything the user should hear is in ``TargetInfo.notes``.
The public names below are imported on first use, so importing this package stays cheap.
"""
from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "CHKHSH": "chkhsh", "CHKTXT": "chkhsh", "FAMILY_NAMES": "pretokenizer",
    "TargetInfo": "info", "check_drafter_fits": "info", "drafter_tokenizer_kvs": "info",
    "load_target": "info", "target_from_gguf": "info", "target_from_hf_dir": "info",
}
__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
