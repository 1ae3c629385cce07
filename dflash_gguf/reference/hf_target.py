"""A transformers-backed target (``--target-backend transformers``) for models the reference lacks.

``HFTarget`` wraps ``AutoModelForCausalLM`` behind exactly the interface ``loop.generate``,
``greedy_decode``, ``teacher_forced`` and ``Workspace`` use from ``Target``, driving it the way
z-lab's ``dflash_generate`` (PyPI dflash 0.1.0) does:

* a ``DynamicCache(config=...)`` with ``activate_past_recording()`` (so sliding-window and
  linear-attention layers can be rolled back), cropped with ``cache.crop(-(len - n))``;
* explicit ``position_ids``, ``use_cache=True``, ``output_hidden_states`` only when features are
  tapped, ``logits_to_keep`` passed through;
* features are ``hidden_states[L + 1]`` for each tap L, read straight from transformers, so the
  last-layer subtlety (that entry is the *final-normed* state) is transformers' own.

z-lab crops the target cache right after the prefill (``crop(-0)``, which trims sliding /
linear layers back to their working size); the loop here does not, so ``HFCache`` performs
that crop lazily: a forward that follows another forward without a ``crop`` in between first
calls ``crop(0)`` on the DynamicCache. For dense targets every such crop is a no-op.

RoPE: transformers computes it itself, so the ``rope`` argument is ignored. ``spec.rope`` is
a trivial default RopeSpec so that ``Workspace`` / ``greedy_decode`` can still build their
(unused, tiny) RopeTable whatever RoPE the model really has.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._lazy import require
from ..errors import ConfigError
from .common import RopeSpec
from .load import resolve_device, resolve_dtype
from .target import check_taps

# Never used for numbers: only lets loop.py build a RopeTable it then hands to HFTarget, which ignores it.
_UNUSED_ROPE = RopeSpec(head_dim=2, theta=10000.0)


@dataclass(frozen=True)
class HFTargetSpec:
    """The fields of ``TargetSpec`` the loop and parity read, from the model's text config."""

    arch: str  # config.model_type
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    tie_word_embeddings: bool
    rope: RopeSpec = _UNUSED_ROPE  # placeholder: transformers applies the real RoPE
    backend: str = "transformers"


class HFCache:
    """``Target``'s cache interface (``length``, ``crop``) over a transformers ``DynamicCache``."""

    def __init__(self, config: Any, capacity: int):
        self.config, self.capacity = config, capacity
        self._new()

    def _new(self) -> None:
        from transformers import DynamicCache

        self.inner = DynamicCache(config=self.config)
        self.inner.activate_past_recording()  # z-lab's _make_cache
        self.length = 0
        self._uncropped = False  # a forward ran since the last crop

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (z-lab's ``_crop_to``); 0 starts a fresh cache."""
        if length == 0:
            self._new()
            return
        current = self.inner.get_seq_length()
        if not 0 <= length <= current:
            raise IndexError(f"cannot crop a cache of {current} positions to {length}")
        self.inner.crop(-(current - length))
        self.length = length
        self._uncropped = False

    def before_forward(self, n_new: int) -> None:
        if self.length + n_new > self.capacity:
            raise IndexError(f"KV write [{self.length}, {self.length + n_new}) outside the cache (capacity {self.capacity})")
        if self._uncropped:
            self.inner.crop(0)  # z-lab's crop right after the prefill (deferred; nothing ran in between)

    def after_forward(self, n_new: int) -> None:
        self.length += n_new
        self._uncropped = True


class HFTarget:
    """A transformers causal LM with ``Target``'s call signature and attributes."""

    def __init__(self, model: Any):
        self.hf = model
        text = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        self.text_config = text
        emb = model.get_input_embeddings()
        head = model.get_output_embeddings()
        if head is None:
            raise ConfigError(f"{type(model).__name__} has no output embeddings (not a causal LM head)")
        self.lm_head = head
        tied = head.weight is emb.weight or head.weight.data_ptr() == emb.weight.data_ptr()
        self.spec = HFTargetSpec(
            arch=str(getattr(text, "model_type", getattr(model.config, "model_type", "?"))),
            hidden_size=int(text.hidden_size),
            num_hidden_layers=int(text.num_hidden_layers),
            vocab_size=int(head.weight.shape[0]),
            tie_word_embeddings=bool(tied),
        )

    # --- what the loop uses -------------------------------------------------------------
    def new_cache(self, capacity: int) -> HFCache:
        return HFCache(self.hf.config, capacity)

    def check_taps(self, taps: tuple[int, ...]) -> None:
        check_taps(taps, self.spec.num_hidden_layers)

    def forward(
        self,
        input_ids: torch.Tensor,  # (1, L) tokens at positions [cache.length, cache.length + L)
        rope: Any,  # ignored: transformers applies its own RoPE
        cache: HFCache,
        taps: tuple[int, ...] = (),
        features_out: torch.Tensor | None = None,  # (capacity, T·H): rows [pos, pos+L) get written
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """Append the tokens to the cache; return logits (1, L or n, V), as ``Target.forward``."""
        del rope
        pos = cache.length
        L = input_ids.shape[1]
        cache.before_forward(L)
        position_ids = torch.arange(pos, pos + L, device=input_ids.device)[None]
        out = self.hf(
            input_ids,
            position_ids=position_ids,
            past_key_values=cache.inner,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            output_hidden_states=bool(taps),
        )
        cache.after_forward(L)
        if taps:
            hs = out.hidden_states
            H = hs[0].shape[-1]
            for slot, t in enumerate(taps):
                features_out[pos:pos + L, slot * H:(slot + 1) * H] = hs[t + 1][0]  # copied across devices
        # placed by a device map, the last layer may sit on another device than the caller's tokens
        return out.logits.to(input_ids.device)

    __call__ = forward

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.hf.get_input_embeddings().weight  # raw table, as z-lab's _raw_input_embeddings

    @property
    def head_weight(self) -> torch.Tensor:
        return self.lm_head.weight

    # --- conveniences (parity's --target-quant walks HF parameter names) ------------------
    def named_parameters(self, *args, **kwargs):
        return self.hf.named_parameters(*args, **kwargs)

    def parameters(self, *args, **kwargs):
        return self.hf.parameters(*args, **kwargs)

    def eval(self) -> "HFTarget":
        self.hf.eval()
        return self


def load_hf_target(target_dir: str | Path, *, dtype: str | torch.dtype = "float32",
                   device: str | torch.device = "auto", attn_implementation: str = "sdpa",
                   device_map: str | None = None) -> HFTarget:
    """Load any causal LM transformers knows (local files only) as a loop target.

    ``attn_implementation="sdpa"`` is what z-lab's benchmark uses. ``device_map`` ("auto", …):
    accelerate spreads the layers over every GPU and then CPU memory, for a target that outgrows
    one device; ``device`` is then only the drafter's.

    Raises:
        UsageError: transformers is not installed, an unknown dtype, or CUDA asked for without one.
        ConfigError: transformers cannot load the directory as a causal LM.
    """
    transformers = require("transformers", "--target-backend transformers", "hf",
                           "or the built-in backend for qwen3/llama targets")
    torch_dtype = resolve_dtype(dtype)
    dev = resolve_device(device)
    placement = {}
    if device_map is not None:
        require("accelerate", f"--device-map {device_map}", "hf")
        placement = {"device_map": device_map}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(target_dir), local_files_only=True, dtype=torch_dtype, attn_implementation=attn_implementation,
            **placement)
    except (OSError, ValueError, KeyError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{target_dir}: transformers cannot load this target ({msg})") from None
    return HFTarget((model if placement else model.to(dev)).eval())
