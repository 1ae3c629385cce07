"""quants/policy.py against the real llama-quantize, tensor by tensor.

Small GGUFs (F32/BF16/F16, a few hundred KB) of every drafter family the converter writes
(mainline DFlash1 and DFlash2, MiMo, DSpark with and without a tied head) and targets built
with gguf-py whose widths exercise every fallback (ne0 a multiple of 256, of 32 only, of
neither), GQA 4, a fused QKV with tied embeddings, 8 experts, a 70B-shaped llama and Falcon,
go through the vendored llama-quantize for every file type it offers and for each user override;
the output header's tensor types must be exactly :func:`llama_plan`'s, the file type ours, and
where llama-quantize refuses or aborts, our plan raises with the same reason. Only the plan is
under test: no quantizer of ours runs. Skips without the binary (`make runtime` builds it).
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter

from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants.ftypes import (
    ALL_FTYPE_IDS, FTYPE_IDS, IMATRIX_FTYPES, NOT_OFFERED, QUANT_OPTIONS, copy_file_type, ftype_id, ftype_refusal,
    parse_ggml_type, parse_tensor_type, plan_hparams, resolve_ftype,
)
from dflash_gguf.quants.policy import Overrides, llama_plan, plan_types, processing_order

from tests.conftest import DRAFTERS, LLAMA_BIN, TARGETS, optional_packages


def _binary() -> Path | None:
    env = os.environ.get("DFLASH_LLAMA_QUANTIZE")
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            pytest.fail(f"DFLASH_LLAMA_QUANTIZE={env} is not an executable llama-quantize")
        return Path(env)
    local = LLAMA_BIN / "llama-quantize"
    return local if local.is_file() and os.access(local, os.X_OK) else None


LQ = _binary()
pytestmark = pytest.mark.skipif(LQ is None, reason="no llama-quantize: build the vendored llama.cpp (`make runtime`) "
                                "or set DFLASH_LLAMA_QUANTIZE")

# every file type llama-quantize lists but Q2_0 (gguf-py 0.19 has no GGML_TYPE_Q2_0)
ALL_TYPES = [n for n, _ in QUANT_OPTIONS if n not in ("Q2_0", "Q3_K", "Q4_K", "Q5_K")]
OVERRIDES = {
    "tensor-type": ["--tensor-type", "ffn_(up|gate)=q5_K"],
    "tensor-type-first-wins": ["--tensor-type", r"blk\.1\.=q4_0", "--tensor-type", "ATTN_V=Q8_0"],
    "tensor-type-float": ["--tensor-type", "attn_q=f16"],
    "tensor-type-imatrix": ["--tensor-type", "ffn_down=iq2_xxs"],
    "output-tensor-type": ["--output-tensor-type", "q8_0"],
    "output-tensor-type-k": ["--output-tensor-type", "q4_K"],
    "token-embedding-type": ["--token-embedding-type", "q5_1"],
    "pure": ["--pure"],
    "leave-output-tensor": ["--leave-output-tensor"],
    "all": ["--pure", "--tensor-type", "attn_k=q5_0", "--output-tensor-type", "f16", "--token-embedding-type", "bf16"],
}
OVERRIDE_FTYPES = ["Q4_K_M", "Q2_K", "F16"]


# --- the inputs ---------------------------------------------------------------------------------
def _write(path: Path, arch: str, kv: dict, tensors: list[tuple[str, np.ndarray]]) -> Path:
    w = GGUFWriter(path, arch)
    for k, v in kv.items():
        (w.add_float32 if isinstance(v, float) else w.add_uint32)(f"{arch}.{k}", v)
    for name, a in tensors:
        w.add_tensor(name, a)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def _rng_tensor(rng, shape, dtype=np.float16) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.02).astype(dtype)


WIDTHS = (256, 288, 80, 512, 96)  # ne0 % 256 == 0, % 32 only, neither, ...


def target(path: Path, *, layers: int, head: int, head_kv: int, tied: bool = False, qkv: bool = False,
           experts: int = 0, only: tuple[str, ...] = (), arch: str = "llama") -> Path:
    """A target-shaped GGUF: F16 matrices of 2 rows (llama-quantize reads names and shapes; it
    never checks them against the hparams), ne0 cycling through WIDTHS per layer and kind."""
    rng = np.random.default_rng(layers * 31 + head)
    kv = {"context_length": 256, "embedding_length": 256, "block_count": layers, "feed_forward_length": 512,
          "attention.head_count": head, "attention.head_count_kv": head_kv}
    kv["attention.layer_norm_epsilon" if arch == "falcon" else "attention.layer_norm_rms_epsilon"] = 1e-5
    if experts:
        kv.update({"expert_count": experts, "expert_used_count": 2})
    t = [("token_embd.weight", _rng_tensor(rng, (16, 256 if tied else 288))),
         ("output_norm.weight", np.ones(256, np.float32))]
    if not tied:
        t.append(("output.weight", _rng_tensor(rng, (16, 288))))
    kinds = only or ((("attn_qkv",) if qkv else ("attn_q", "attn_k", "attn_v")) + ("attn_output", "ffn_up", "ffn_down")
                     + (() if arch == "falcon" else ("ffn_gate",)))
    for i in range(layers):
        p = f"blk.{i}."
        if not only:
            t.append((p + "attn_norm.weight", np.ones(256, np.float32)))
        for j, k in enumerate(kinds):
            w = WIDTHS[(i + j) % len(WIDTHS)]
            if experts and k.startswith("ffn_"):
                t.append((p + f"{k}_exps.weight", _rng_tensor(rng, (experts, 2, w))))
            else:
                t.append((p + f"{k}.weight", _rng_tensor(rng, (2, w))))
        if experts:
            t.append((p + "ffn_gate_inp.weight", _rng_tensor(rng, (experts, 256), np.float32)))
    return _write(path, arch, kv, t)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """name -> input GGUF. Drafters converted by our converter (F32, BF16, F16), targets by gguf-py.
    A drafter whose conversion needs an optional package that is not installed is left out (its
    tests skip)."""
    from dflash_gguf.convert import convert

    root = tmp_path_factory.mktemp("policy-live")
    out: dict[str, Path] = {}

    def add(name: str, build) -> None:
        """build() -> (checkpoint dir, target dir, outtype)."""
        try:
            with optional_packages():
                src, target_dir, outtype = build()
                convert(src, root / f"{name}.gguf", target_dir=target_dir, outtype=outtype)
        except pytest.skip.Exception:
            return
        out[name] = root / f"{name}.gguf"

    def dspark(case: str, outtype: str):
        from tests.convert.dspark_ckpt import build_case, spm_target_dir

        return build_case(root / "ckpt", case), spm_target_dir(root), outtype

    def mimo():
        from tests.convert.test_mimo import make_mimo, target_with_head  # torch writes its side file

        return make_mimo(root, neox=False), target_with_head(root, tied=False), "f16"

    qwen = TARGETS / "qwen3-tiny"
    add("dflash1-f32", lambda: (DRAFTERS / "qwen3-flat", qwen, "f32"))
    add("dflash2-bf16", lambda: (DRAFTERS / "qwen3-dflash2", qwen, "bf16"))
    add("dflash1-nested-f16", lambda: (DRAFTERS / "qwen3-nested", qwen, "f16"))
    add("dspark-qwen3-reduced", lambda: dspark("qwen3-reduced", "f32"))
    add("dspark-gemma4-tied", lambda: dspark("gemma4-tied", "bf16"))
    if _has("torch"):
        add("mimo-f16", mimo)
    out["llama-gqa4"] = target(root / "llama-gqa4.gguf", layers=16, head=8, head_kv=2)
    out["llama-tied-qkv"] = target(root / "llama-tied-qkv.gguf", layers=8, head=4, head_kv=4, tied=True, qkv=True)
    out["llama-moe8"] = target(root / "llama-moe8.gguf", layers=4, head=8, head_kv=8, experts=8)
    out["llama-70b"] = target(root / "llama-70b.gguf", layers=80, head=8, head_kv=1,
                              only=("attn_v", "attn_q", "ffn_down"))
    out["falcon"] = target(root / "falcon.gguf", layers=16, head=8, head_kv=1, qkv=True, arch="falcon")
    big = [p for p in out.values() if p.stat().st_size > 1_000_000]
    assert not big, f"keep the inputs tiny: {big}"
    return out


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


MODEL_NAMES = ["dflash1-f32", "dflash2-bf16", "dflash1-nested-f16", "dspark-qwen3-reduced", "dspark-gemma4-tied",
               "mimo-f16", "llama-gqa4", "llama-tied-qkv", "llama-moe8", "llama-70b", "falcon"]
_info_cache: dict[Path, tuple[list, dict, int | None]] = {}


def info(path: Path):
    """(tensors as (name, numpy shape, type), plan_hparams kwargs, general.file_type or None)."""
    if path not in _info_cache:
        r = GGUFReader(path)
        tensors = [(t.name, tuple(int(x) for x in reversed(t.shape)), T(int(t.tensor_type))) for t in r.tensors]
        kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
        ft = kv.get("general.file_type")
        _info_cache[path] = (tensors, plan_hparams(kv), None if ft is None else int(ft))
    return _info_cache[path]


def model(models, name: str) -> Path:
    if name not in models:
        pytest.skip(f"{name}: its conversion needs an optional package that is not installed")
    return models[name]


# --- running llama-quantize and comparing -----------------------------------------------------------
def run_llama_quantize(src: Path, dst: Path, ftype: str, args: list[str]) -> tuple[int, str]:
    env = {**os.environ, "GGML_NO_BACKTRACE": "1",
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(LQ.parent), os.environ.get("LD_LIBRARY_PATH")]))}
    r = subprocess.run([str(LQ), *args, str(src), str(dst), ftype, "2"], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    return r.returncode, r.stdout + r.stderr


def overrides_from_args(args: list[str]) -> Overrides:
    """quantize.cpp's option loop, for the options under test, through our parsers."""
    kw: dict = {"tensor_types": []}
    it = iter(args)
    for a in it:
        if a == "--tensor-type":
            kw["tensor_types"].append(parse_tensor_type(next(it)))
        elif a in ("--output-tensor-type", "--token-embedding-type"):
            kw[a[2:].replace("-", "_")] = parse_ggml_type(next(it))
        elif a in ("--pure", "--leave-output-tensor"):
            kw[a[2:].replace("-", "_")] = True
        else:
            raise AssertionError(a)
    return Overrides(**kw)


def llama_says(err: str) -> list[str]:
    """What llama-quantize prints for the failure our message describes."""
    if m := re.search(r"offending tensor: (\S+), target type: (\S+) ", err):
        return ["this quantization requires an importance matrix!", f"offending tensor: {m[1]}\n",
                f"target type: {m[2]}\n"]
    if m := re.search(r'"(no tensor type fallback is defined for type \S+)"', err):
        return [m[1]]
    if "tensor row size not divisible by block size of new type" in err:
        return ["tensor row size not divisible by block size of new type"]
    raise AssertionError(f"an error llama-quantize has no counterpart for: {err}")


def check(src: Path, tmp_path: Path, ftype: str, args: list[str] = ()) -> str:
    """Run llama-quantize and our plan on ``src``; assert they agree. Returns what happened."""
    tensors, hp, in_file_type = info(src)
    ov = overrides_from_args(list(args))
    dst = tmp_path / "out.gguf"
    rc, log = run_llama_quantize(src, dst, ftype, list(args))
    try:
        plan, err = llama_plan(tensors, ftype, **hp, overrides=ov), None
    except QuantizationError as e:
        plan, err = None, str(e)
    mix = resolve_ftype(ftype)
    if err is None:
        assert rc == 0, f"llama-quantize failed where our plan did not:\n{log[-3000:]}"
        r = GGUFReader(dst)
        got = {t.name: T(int(t.tensor_type)).name for t in r.tensors}
        want = {c.name: c.ggml_type.name for c in plan}
        why = {c.name: c.reason for c in plan}
        diff = {n: (got.get(n), want.get(n), why.get(n)) for n in sorted(set(got) | set(want)) if got.get(n) != want.get(n)}
        assert not diff, f"{len(diff)} tensor(s) differ (llama-quantize, ours, our reason): {diff}"
        assert [t.name for t in r.tensors] == processing_order([n for n, *_ in tensors])
        in_types = {n: t for n, _s, t in tensors}
        want_ft = (copy_file_type(in_file_type, [in_types[n] for n in processing_order(list(in_types))])
                   if mix == "COPY" else ftype_id(mix))
        assert int(r.fields["general.file_type"].contents()) == want_ft
        outcome = "same plan"
    else:
        assert rc != 0, f"llama-quantize succeeded where our plan raised {err!r}"
        for needle in llama_says(err):
            assert needle in log, f"llama-quantize's log lacks {needle!r} (ours: {err}):\n{log[-3000:]}"
        outcome = "same refusal"
    dst.unlink(missing_ok=True)
    # the public entry point: the same plan for the file types we write, a refusal for the others
    # MXFP4_MOE is written where no tensor needs an MXFP4 encoding (experts already MXFP4, or none)
    in_types = {n: t for n, _s, t in tensors}
    copies_only = mix == "MXFP4_MOE" and err is None and not any(
        c.ggml_type == T.MXFP4 and in_types[c.name] != T.MXFP4 for c in plan)
    if (mix in FTYPE_IDS and err is None) or copies_only:
        assert [(c.name, c.ggml_type) for c in plan_types(tensors, ftype, **hp, overrides=ov)] == \
               [(c.name, c.ggml_type) for c in plan]
    else:
        with pytest.raises(QuantizationError) as exc:
            plan_types(tensors, ftype, **hp, overrides=ov)
        assert str(exc.value).startswith(err if err is not None and mix not in NOT_OFFERED else ftype_refusal(mix))
    return outcome


# --- the matrix -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ftype", ALL_TYPES)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_file_type(models, tmp_path, name, ftype):
    outcome = check(model(models, name), tmp_path, ftype)
    if ftype in FTYPE_IDS:
        assert outcome == "same plan"  # no model here is refused a file type we offer


@pytest.mark.parametrize("ftype", OVERRIDE_FTYPES)
@pytest.mark.parametrize("override", OVERRIDES)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_overrides(models, tmp_path, name, override, ftype):
    check(model(models, name), tmp_path, ftype, OVERRIDES[override])


# std::regex (ECMAScript, libstdc++) where Python's re would read the pattern otherwise; each
# pattern also goes through quantize.cpp's lower-casing (ATTN_V, \\D -> \\d)
REGEXES = [r"attn_\D", r"ATTN_V", r"[[:alpha:]]_v", r"[]a]ttn", r"[^]ttn_v", r"\attn_v", r"\u0061ttn_q", r"a|",
           r"()attn_v", r"f{2,}", r"\d{1}\.attn_\w\.", r"blk.0.attn_v.weight$", r"attn_[qk]\b", r"attn_[^qk]",
           r"ffn_u\p", r"^blk\.1\.", r"(?:ffn)_(up|down)\.weight$", r"[[:punct:]]0[[:punct:]]attn_v", r"\.weight$",
           r"^(?!blk)", r"(?!blk\.1)blk\.\d\.attn_v", r"markov|fc\.", r"\x2e1\x2e", r"[\d]", r"\cf\cf", r"ffn_(up)\1"]
BAD_REGEXES = [r"(?i)attn", r"attn[", r"a{2,1}", r"x{,3}", r"ffn_{", r"[[:foo:]]", r"(attn", r"attn)", r"\1(a)",
               r"[z-a]", r"*", "attn\\"]


@pytest.mark.parametrize("pattern", REGEXES)
@pytest.mark.parametrize("name", ["dflash1-f32", "dspark-qwen3-reduced", "llama-gqa4"])
def test_tensor_type_patterns_are_std_regex(models, tmp_path, name, pattern):
    assert check(model(models, name), tmp_path, "Q4_K_M", ["--tensor-type", f"{pattern}=q5_1"]) == "same plan"


@pytest.mark.parametrize("pattern", BAD_REGEXES)
def test_patterns_std_regex_refuses_are_refused(models, tmp_path, pattern):
    rc, log = run_llama_quantize(models["llama-gqa4"], tmp_path / "x.gguf", "Q4_K_M", ["--tensor-type", f"{pattern}=q5_1"])
    assert rc != 0 and "failed to quantize:" in log, log[-2000:]
    with pytest.raises(QuantizationError, match="std::regex refuses it"):
        Overrides(tensor_types=[parse_tensor_type(f"{pattern}=q5_1")])


@pytest.mark.parametrize("spelling", ["q4_k", "Q5_K", "q3_k", "15", "7", "0", "copy", "Copy", "iq4_xs", "32"])
def test_names_aliases_and_ids_resolve_as_llama_quantize_does(models, tmp_path, spelling):
    src = models["llama-gqa4"]  # no general.file_type: COPY writes the guessed one (1024 | F16)
    check(src, tmp_path, spelling)
    assert resolve_ftype(spelling) in FTYPE_IDS


def test_the_matrix_is_what_it_claims():
    assert set(FTYPE_IDS) | set(IMATRIX_FTYPES) | set(NOT_OFFERED) == set(ALL_FTYPE_IDS) - {"Q3_K", "Q4_K", "Q5_K"}
    assert len(ALL_TYPES) == 35 and set(FTYPE_IDS) <= set(ALL_TYPES)
