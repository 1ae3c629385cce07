"""The corpus of published drafter configs (fixtures/published/) and sparse checkpoints of them.

``load_index()`` lists the entries (see fixtures/published/README.md for the fields);
``sparse_checkpoint(slug, dest)`` lays the drafter out in ``dest`` the way its publisher does:
its config.json, a safetensors file whose header lists every tensor at its real dtype and shape
and whose data region is a hole (the file is extended with truncate(), nothing is written, so a
5 GB checkpoint costs a few kB of disk and milliseconds; an entry with ``shards`` gets one such file
per shard, as its publisher splits the checkpoint), the side files the publisher ships and its model
card (README.md).

Run ``python -m tests.convert.published --write-tables`` to refresh every entry's tensors.json from
its derivation (published_tables.py); it needs torch, transformers and z-lab's ``dflash``.
"""
from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

from tests.conftest import FIXTURES
from tests.convert import published_tables

PUBLISHED = FIXTURES / "published"
INDEX = PUBLISHED / "index.json"
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
FAMILIES = ("dflash1", "dflash2", "muse-assistant", "mimo", "dspark", "dspark-eagle3", "gemma4-dspark",
            "dsv4-dspark")
SIDE_FILES = ("mask_embedding.pt", "model.safetensors.index.json")
CARD = "README.md"  # the publisher's model card: its front matter becomes general.* keys


def load_index() -> list[dict]:
    """Every corpus entry, in index order."""
    return json.loads(INDEX.read_text(encoding="utf-8"))["entries"]


def entry(slug: str) -> dict:
    for e in load_index():
        if e["slug"] == slug:
            return e
    raise KeyError(f"no published entry {slug!r}")


def slug_dir(slug: str) -> Path:
    return PUBLISHED / slug


def drafter_config(slug: str) -> dict:
    return json.loads((slug_dir(slug) / "config.json").read_text(encoding="utf-8"))


def target_config(slug: str) -> dict:
    return json.loads((slug_dir(slug) / "target_config.json").read_text(encoding="utf-8"))


def published_header(slug: str) -> Path | None:
    """The publisher's own safetensors header, when one is public (names, dtypes, shapes, offsets)."""
    path = slug_dir(slug) / "safetensors_header.json"
    return path if path.is_file() else None


def tensor_table(slug: str) -> published_tables.Table:
    """The entry's tensors: its published header if there is one, else its cached tensors.json."""
    header = published_header(slug)
    if header is not None:
        return published_tables.header_table(header)
    rows = json.loads((slug_dir(slug) / "tensors.json").read_text(encoding="utf-8"))["tensors"]
    return [(n, d, list(s)) for n, d, s in rows]


def derive_table(slug: str) -> published_tables.Table:
    """Re-derive the entry's table from its config (torch-backed for ``reference:*`` entries)."""
    return published_tables.derive(entry(slug)["tensors"], drafter_config(slug), published_header(slug))


def nbytes(dtype: str, shape: list[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def data_bytes(slug: str) -> int:
    """Bytes of tensor data the entry's weights files hold (what ``total_size`` would say)."""
    return sum(nbytes(d, s) for _, d, s in tensor_table(slug))


def shard_tables(slug: str) -> dict[str, published_tables.Table]:
    """Weights file -> the rows it holds: the entry's ``weights_file`` alone, or, for an entry
    with ``shards`` (a checkpoint split as the publisher splits it), each shard's rows, a row
    going to the one shard with a name prefix it starts with."""
    e = entry(slug)
    rows = tensor_table(slug)
    if not e.get("shards"):
        return {e["weights_file"]: rows}
    out: dict[str, published_tables.Table] = {s["file"]: [] for s in e["shards"]}
    for row in rows:
        files = [s["file"] for s in e["shards"] if row[0].startswith(tuple(s["prefixes"]))]
        if len(files) != 1:
            raise ValueError(f"{slug}: {row[0]} matches {len(files)} shards' prefixes, not one")
        out[files[0]].append(row)
    return out


# ---------------------------------------------------------------- sparse safetensors

def _header_bytes(slug: str, rows: published_tables.Table | None = None) -> tuple[bytes, int]:
    """A safetensors header for the entry (or for ``rows``, one shard's) and the data size it declares."""
    header_path = published_header(slug)
    if header_path is not None and rows is None:
        # Keep the publisher's offsets too: the file then has the published layout, hole aside.
        header = json.loads(header_path.read_text(encoding="utf-8"))
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    else:
        header, end = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape in (tensor_table(slug) if rows is None else rows):
            size = nbytes(dtype, shape)
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [end, end + size]}
            end += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header so the data region is 8-aligned
    return raw, end


def write_sparse_safetensors(path: Path, raw_header: bytes, data_size: int) -> int:
    """Write header then punch the data region as a hole; returns the file's apparent size."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw_header)))
        f.write(raw_header)
        f.truncate(8 + len(raw_header) + data_size)
    os.replace(tmp, path)
    return 8 + len(raw_header) + data_size


def _write_mask_embedding(path: Path, cfg: dict) -> None:
    # Layout as vLLM's qwen3_dflash.py::_read_mask_embedding and llama.cpp's DFlashModel read it,
    # and as the MiMo-V2.5-DFlash artifact audit pins it: exactly {"mask_token_id", "embedding"},
    # the embedding a BF16 vector of hidden_size. Zeros: no real bytes exist here either.
    import torch

    mask_id = (cfg.get("dflash_config") or {}).get("mask_token_id", cfg.get("mask_token_id"))
    tmp = path.with_name(path.name + ".part")
    torch.save({"mask_token_id": int(mask_id),
                "embedding": torch.zeros(cfg["hidden_size"], dtype=torch.bfloat16)}, tmp)
    os.replace(tmp, path)


def _write_index_json(path: Path, slug: str) -> None:
    # The sharded-index form MiMo ships beside its single weights file (llama.cpp finds a weights
    # file that does not start with "model" only through this map), and every sharded checkpoint.
    where = {name: file for file, rows in shard_tables(slug).items() for name, _, _ in rows}
    index = {"metadata": {"total_size": data_bytes(slug)},
             "weight_map": {name: where[name] for name, _, _ in tensor_table(slug)}}
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def sparse_checkpoint(slug: str, dest: Path, *, side_files: bool = True) -> Path:
    """Lay out the published drafter ``slug`` in ``dest`` and return the weights file's path.

    ``side_files=False`` skips files that need torch to write (mask_embedding.pt). An entry with
    ``shards`` is written as those shards (``shard_tables``); ``weights_file`` is one of them."""
    e = entry(slug)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_bytes((slug_dir(slug) / "config.json").read_bytes())
    if (slug_dir(slug) / CARD).is_file():
        (dest / CARD).write_bytes((slug_dir(slug) / CARD).read_bytes())
    weights = dest / e["weights_file"]
    if e.get("shards"):
        for file, rows in shard_tables(slug).items():
            write_sparse_safetensors(dest / file, *_header_bytes(slug, rows))
    else:
        write_sparse_safetensors(weights, *_header_bytes(slug))
    for name in e["side_files"]:
        if name == "model.safetensors.index.json":
            _write_index_json(dest / name, slug)
        elif name == "mask_embedding.pt" and side_files:
            _write_mask_embedding(dest / name, drafter_config(slug))
    return weights


def sparse_target_weights(slug: str, dest: Path) -> Path | None:
    """Sparse target weights the converter must read for this entry, or None when it needs none.

    A ``mask_embedding.pt`` makes llama.cpp patch the target's embedding row and copy the target's
    output head into the draft GGUF, so ``--target-model-dir`` must then hold both tensors (names as
    the MiMo target index maps them: model.embed_tokens.weight, lm_head.weight)."""
    if "mask_embedding.pt" not in entry(slug)["side_files"]:
        return None
    tc = target_config(slug)
    tc = {**tc, **tc.get("text_config", {})}
    vocab, hidden = tc["vocab_size"], tc["hidden_size"]
    size = nbytes("BF16", [vocab, hidden])
    header = {"__metadata__": {"format": "pt"},
              "lm_head.weight": {"dtype": "BF16", "shape": [vocab, hidden], "data_offsets": [0, size]},
              "model.embed_tokens.weight": {"dtype": "BF16", "shape": [vocab, hidden],
                                            "data_offsets": [size, 2 * size]}}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "model.safetensors"
    write_sparse_safetensors(path, raw, 2 * size)
    return path


def sparse_float_target_gguf(slug: str, vocab_gguf: Path, dest: Path) -> Path:
    """``vocab_gguf`` (the target as llama.cpp's converter writes it with --vocab-only) plus the
    tensors a mask_embedding.pt drafter borrows, as BF16 holes: the float target GGUF that
    ``convert --target-gguf`` needs for such a drafter (KVs copied with gguf-py, in order)."""
    import gguf
    import numpy as np

    tc = target_config(slug)
    tc = {**tc, **tc.get("text_config", {})}
    vocab, hidden = tc["vocab_size"], tc["hidden_size"]
    names = ["token_embd.weight"] + ([] if tc.get("tie_word_embeddings") else ["output.weight"])
    r = gguf.GGUFReader(vocab_gguf)
    w = gguf.GGUFWriter(dest, str(r.fields["general.architecture"].contents()))
    for k, f in r.fields.items():
        if not k.startswith("GGUF.") and k != "general.architecture":
            w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    size = nbytes("BF16", [vocab, hidden])
    for name in names:
        w.add_tensor_info(name, (vocab, hidden), np.dtype(np.float16), size, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(dest, "r+b") as f:  # the data section: aligned start, every tensor a hole
        start = f.seek(0, os.SEEK_END)
        start += -start % w.data_alignment
        f.truncate(start + sum(size + (-size % w.data_alignment) for _ in names))
    return dest


def write_tables(slugs: list[str] | None = None) -> None:
    """Refresh tensors.json for the given entries (all that have no published header by default)."""
    for e in load_index():
        if (slugs and e["slug"] not in slugs) or published_header(e["slug"]) is not None:
            continue
        rows = derive_table(e["slug"])
        body = {"derived_by": e["tensors"], "tensors": rows}
        out = slug_dir(e["slug"]) / "tensors.json"
        text = "{\n" + f'  "derived_by": {json.dumps(body["derived_by"])},\n  "tensors": [\n'
        text += ",\n".join("    " + json.dumps(list(r)) for r in rows) + "\n  ]\n}\n"
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
        print(f"{e['slug']}: {len(rows)} tensors, {data_bytes(e['slug']):,} bytes")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-tables"]:
        write_tables(sys.argv[2:] or None)
    else:
        sys.exit("usage: python -m tests.convert.published --write-tables [SLUG...]")
