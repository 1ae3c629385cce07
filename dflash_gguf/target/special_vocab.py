"""The KVs gguf-py's ``SpecialVocab`` adds after the tokens: merges, special token ids,
add_bos/add_eos/add_sep, chat template(s) and normalizer flags.

Rewritten from llama-cpp-python 0.3.36's vendored gguf-py; the same decisions in the same
order, down to its crude rules for TemplateProcessing post-processors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TargetError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.types import KV, kv_array, kv_bool, kv_str, kv_u32
from .hf_files import HINT, read_json, tokenizer_config
from .keys import K_CHAT_TEMPLATE, K_CHAT_TEMPLATES, K_MASK_ID, K_MERGES, K_NORM_LOWER, K_NORM_STRIP

SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
_ID_KEYS = {  # SpecialVocab type -> key; "cls" has no writer handler and is never written
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",  # sic, as in gguf-py
    "pad": "tokenizer.ggml.padding_token_id",
    "mask": K_MASK_ID,
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
}
ADD_KEYS = {  # only these add_<typ>_token flags have writer handlers
    "bos": "tokenizer.ggml.add_bos_token",
    "eos": "tokenizer.ggml.add_eos_token",
    "sep": "tokenizer.ggml.add_sep_token",
}


def special_vocab_kvs(d: Path, *, load_merges: bool, n_vocab: int | None, notes: list[str], tj: Any = None) -> list[KV]:
    """The KVs gguf-py's ``SpecialVocab(d, load_merges, n_vocab).add_to_gguf`` writes, in
    its order: merges, special ids, add_*_token flags, chat template, normalizer flags.
    ``tj``: tokenizer.json already parsed (it is only read here, never changed)."""
    types: list[str] = list(SPECIAL_TYPES)
    ids: dict[str, int] = {}
    add: dict[str, bool] = {}
    merges: list[str] = []
    lower: bool | None = None
    strip: bool | None = None

    def set_id(typ: str, tid: Any) -> None:
        if not isinstance(tid, int):
            return
        if tid < 0:
            raise TargetError(f"{d}: special token {typ} has id {tid}; fix the config, or {HINT}")
        if n_vocab is None or tid < n_vocab:
            ids.setdefault(typ, tid)
        else:
            notes.append(f"special token {typ} id {tid} is past the {n_vocab}-token vocab; skipped (as llama.cpp does)")

    def parse_normalizer(n: Any) -> None:
        nonlocal lower, strip
        if not isinstance(n, dict):
            return
        t = n.get("type")
        if t == "Lowercase":
            lower = True
        elif t == "StripAccents":
            strip = True
        elif t == "BertNormalizer":
            if "lowercase" in n:
                lower = n["lowercase"]
            if "strip_accents" in n:
                strip = n["strip_accents"]
        elif t == "Sequence":
            for sub in n.get("normalizers", []):
                parse_normalizer(sub)

    # --- tokenizer.json: merges, normalizer, post-processor ---
    tj_path = d / "tokenizer.json"
    if tj_path.is_file():
        if tj is None:
            tj = read_json(tj_path)
        if load_merges:
            merges = _merges_from_json(tj, tj_path)
        if tj.get("normalizer"):
            parse_normalizer(tj["normalizer"])
        added_tokens = tj.get("added_tokens", [])
    else:
        added_tokens = []
    tc = tokenizer_config(d)  # a fresh copy: SpecialVocab's logic writes into it
    if tj:
        bos, cls = (tc or {}).get("bos_token"), (tc or {}).get("cls_token")
        eos, sep = (tc or {}).get("eos_token"), (tc or {}).get("sep_token")
        if not bos and cls and tc:
            tc["bos_token"] = bos = cls
        if not eos and sep and tc:
            tc["eos_token"] = eos = sep
        post = tj.get("post_processor")
        if post:
            for proc in post.get("processors", [post]):
                ptype = proc.get("type")
                if ptype == "ByteLevel":
                    add.setdefault("bos", False)
                    add.setdefault("eos", False)
                elif ptype == "RobertaProcessing":
                    add["bos"] = add["eos"] = add["sep"] = True
                    if not cls and tc:
                        cls = proc.get("cls", [bos])[0]
                        tc["cls_token"] = cls
                    if not sep and tc:
                        sep = proc.get("sep", [eos])[0]
                        tc["sep_token"] = sep
                elif ptype == "TemplateProcessing":
                    bos, eos, cls, sep = _template_processing(proc, tc, add, types, bos, eos, cls, sep)

    # --- tokenizer_config.json: chat template, add_* flags, special tokens by content ---
    template: Any = None
    if tc:
        alt: Any = None
        jinja, tjson = d / "chat_template.jinja", d / "chat_template.json"
        if jinja.is_file():
            alt = jinja.read_text(encoding="utf-8")
            extra = sorted((d / "additional_chat_templates").glob("*.jinja"))
            if extra:
                alt = [{"name": "default", "template": alt}] + [
                    {"name": p.stem, "template": p.read_text(encoding="utf-8")} for p in extra
                ]
        elif tjson.is_file():
            doc = read_json(tjson)
            alt = doc.get("chat_template") if isinstance(doc, dict) else None
        template = tc.get("chat_template", alt)
        if template is not None and not isinstance(template, (str, list)):
            notes.append("tokenizer_config.json chat_template has an unexpected type; not embedded (as llama.cpp does)")
            template = None
        for typ in types:
            flag = tc.get(f"add_{typ}_token")
            if isinstance(flag, bool) and typ not in add:
                add[typ] = flag
            entry = tc.get(f"{typ}_token")
            if isinstance(entry, dict):
                entry = entry.get("content")
            if not isinstance(entry, str):
                continue
            tid = next((a.get("id") for a in added_tokens if a.get("content") == entry), None)
            set_id(typ, tid)

    # --- config.json: <typ>_token_id (root, then text_config) ---
    cfg_path = d / "config.json"
    if cfg_path.is_file():
        cfg = read_json(cfg_path)
        for typ in types:
            tid = cfg.get(f"{typ}_token_id")
            if tid is None and isinstance(cfg.get("text_config"), dict):
                tid = cfg["text_config"].get(f"{typ}_token_id")
            set_id(typ, tid)

    if load_merges and not merges:
        merges = _merges_from_txt(d / "merges.txt")

    out: list[KV] = []
    if merges:
        out.append(kv_array(K_MERGES, merges, T.STRING))
    for typ, tid in ids.items():
        if typ in _ID_KEYS:
            out.append(kv_u32(_ID_KEYS[typ], tid))
    for typ, flag in add.items():
        if typ in ADD_KEYS:
            out.append(kv_bool(ADD_KEYS[typ], flag))
    out += _chat_template_kvs(template)
    if lower is not None:
        out.append(kv_bool(K_NORM_LOWER, bool(lower)))
    if strip is not None:
        out.append(kv_bool(K_NORM_STRIP, bool(strip)))
    return out


def _template_processing(proc: dict, tc: dict | None, add: dict, types: list, bos, eos, cls, sep):
    """SpecialVocab's reading of a TemplateProcessing post-processor: which special tokens
    wrap a single sequence (add_bos/add_eos, possibly a new eos with the old one as eot/eom)
    and whether a pair gets a separator (add_sep). Same decisions, same crude rules."""
    single = proc.get("single", [])
    pair = proc.get("pair", [])
    first = last = None
    if len(single) > 1:
        first = single[0].get("SpecialToken", {}).get("id")
        if first:
            if not tc:
                bos = first
            elif first not in (bos, cls):
                if not bos:
                    tc["bos_token"] = bos = first
                if not cls:
                    tc["cls_token"] = cls = first
            add["bos"] = first in (bos, cls)
        last = single[-1].get("SpecialToken", {}).get("id")
        if last:
            if not tc:
                eos = last
            elif last != eos:
                if "eot" not in types:
                    types.append("eot")
                    tc["eot_token"] = eos
                elif "eom" not in types:
                    types.append("eom")
                    tc["eom_token"] = eos
                tc["eos_token"] = eos = last
            add["eos"] = last == eos
    if pair:
        start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
        stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
        pair = pair[slice(start, stop)]
        if pair:
            a = pair[0].get("Sequence", {}).get("id")
            b = pair[-1].get("Sequence", {}).get("id")
            middle = pair[1:-1]
            if a == "A" and b == "B" and middle:
                add_sep = False
                entry = middle[0].get("SpecialToken", {}).get("id")
                if entry and entry in (sep, eos) and not last:
                    add_sep = True
                if len(middle) == 2:
                    entry = middle[1].get("SpecialToken", {}).get("id")
                    if entry and entry in (sep, eos):
                        add_sep = True
                add["sep"] = add_sep
                if add_sep and not sep and tc:
                    tc["sep_token"] = eos
    return bos, eos, cls, sep


_SPACE = chr(ord(" ") + 256)  # "\u0120"


def _merges_from_json(tj: dict, where: Path) -> list[str]:
    merges = (tj.get("model") or {}).get("merges")
    if not isinstance(merges, list) or not merges:
        return []
    if isinstance(merges[0], str):
        return list(merges)
    if isinstance(merges[0], list) and len(merges[0]) == 2 and isinstance(merges[0][0], str):
        # Pair form (transformers >= 4.45): llama.cpp joins with a space and writes a space
        # inside a part as U+0120 (chr(ord(" ") + 256)), the byte-level spelling of " "
        # (its per-character rewrite, as one str.replace per part: 150k merges in ~50 ms).
        if all(type(pair) is list and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is str
               for pair in merges):
            return [f"{a.replace(' ', _SPACE)} {b.replace(' ', _SPACE)}" for a, b in merges]
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair) for pair in merges]
    raise TargetError(f"{where}: model.merges has an unknown format; {HINT}")


def _merges_from_txt(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0].strip().startswith("#"):
        lines = lines[1:]
    out = []
    for line in lines:
        parts = line.strip().split(None, 3)
        if len(parts) == 2:  # llama.cpp skips malformed lines with a warning
            out.append(f"{parts[0]} {parts[1]}")
    return out


def _chat_template_kvs(template: Any) -> list[KV]:
    if template is None:
        return []
    if isinstance(template, str):
        return [kv_str(K_CHAT_TEMPLATE, template)]
    out: list[KV] = []
    names: list[str] = []
    default = None
    for choice in template:
        if not isinstance(choice, dict):
            continue
        name = "".join(c if c.isascii() and c.isalnum() else "_" for c in str(choice.get("name", "")))
        body = choice.get("template")
        if not name or body is None:
            continue
        if name == "default":
            default = body
        else:
            if name not in names:
                names.append(name)
            out.append(kv_str(f"{K_CHAT_TEMPLATE}.{name}", body))
    if names:
        # gguf-py collects the names in a set (arbitrary order); we keep file order.
        out.append(kv_array(K_CHAT_TEMPLATES, names, T.STRING))
    if default is not None:
        out.append(kv_str(K_CHAT_TEMPLATE, default))
    return out
