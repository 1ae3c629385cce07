"""Golden activations: --dump writes every drafted round of the reference trajectory as
safetensors plus an index.json; --against compares another runtime's dump in that layout."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError

DUMP_VERSION = 1


def dump_prompt(d: Path, pi: int, result) -> dict[str, Any]:
    """Write prompt ``pi``'s drafted rounds to ``d``; returns its index entry."""
    import torch
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    steps = []
    for k, s in enumerate(result.steps):
        if not s.draft:
            continue
        q = len(s.block)
        tensors = {
            "context": s.context.float().cpu().contiguous(),
            "block_ids": torch.tensor(s.block, dtype=torch.int64),
            "positions": torch.arange(s.start, s.start + q, dtype=torch.int64),
            "draft_logits": s.draft_logits.float().cpu().contiguous(),
        }
        tl = getattr(s, "target_logits", None)
        if tl is not None:
            tensors["target_logits"] = tl.float().cpu().contiguous()
        name = f"prompt{pi:02d}_step{k:04d}.safetensors"
        save_file(tensors, str(d / name))
        steps.append({"file": name, "start": s.start, "q": q, "draft": list(s.draft), "accepted": int(s.accepted),
                      "bonus": int(s.bonus), "tensors": sorted(tensors)})
    return {"prompt": pi, "steps": steps}


def write_index(d: Path, prompts, settings, entries) -> None:
    index = {"version": DUMP_VERSION, "producer": "dflash-gguf parity (torch reference of z-lab dflash 0.1.0)",
             "prompts": [list(p) for p in prompts], "settings": settings, "entries": entries}
    (d / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def compare_dumps(ours: Path, theirs: Path) -> dict[str, Any]:
    """Tensor-by-tensor max |Δ| between two dumps of the same trajectory."""
    from safetensors.numpy import load_file

    def index(d: Path) -> dict:
        p = d / "index.json"
        if not p.is_file():
            raise UsageError(f"{d}: no index.json; is this a parity --dump directory?")
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: not valid JSON ({exc})") from None

    a, b = index(ours), index(theirs)
    worst: dict[str, float] = {}
    missing: list[str] = []
    compared = 0
    b_files = {s["file"] for e in b["entries"] for s in e["steps"]}
    for e in a["entries"]:
        for s in e["steps"]:
            if s["file"] not in b_files:
                missing.append(s["file"])
                continue
            ta, tb = load_file(str(ours / s["file"])), load_file(str(theirs / s["file"]))
            for name, x in ta.items():
                if name not in tb:
                    missing.append(f"{s['file']}:{name}")
                    continue
                y = tb[name]
                if x.shape != y.shape:
                    worst[name] = float("inf")
                    continue
                diff = float(abs(x.astype("float64") - y.astype("float64")).max()) if x.size else 0.0
                worst[name] = max(worst.get(name, 0.0), diff)
                compared += 1
    return {"tensors_compared": compared, "max_abs_by_tensor": worst, "missing": missing,
            "identical": not missing and all(v == 0.0 for v in worst.values())}
