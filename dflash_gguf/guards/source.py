"""``check --source``: does a drafter GGUF still match the config.json of the checkpoint it was
converted from?

A drafter re-published under the same name with another depth or other taps leaves every old
GGUF loadable and wrong. The comparison reads the source's config.json only (no weights) and
asks the converter what it would write for it, so there is one source of these facts:

- constants: ``compare.constants.compare_constants``, the keys compare-weights checks;
- tensors: ``convert.plan.build_plan`` on a stand-in inventory with the shapes config.json
  implies. Whatever only the weights decide (optional embeddings, a DSpark Markov head without
  ``markov_rank``, a confidence head) is taken as present when the file has it. The fc width
  depends on the target: the target's hidden size is the file's fc width over its tap count.

Every mismatch is one finding of category ``source``; the library never prints.
"""
from __future__ import annotations

import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DflashError, InputError
from ..fileio.gguf_header import GGUFHeader, show
from .findings import Finding, Severity

if TYPE_CHECKING:
    from ..compare.constants import ConstantComparison
    from ..config import DrafterConfig
    from ..fileio.gguf_reader import GGUFFile
    from ..formats import DrafterMeta, Format
    from .drafter_checks import DrafterView

CATEGORY = "source"
SAME, MISSING, EXTRA, SHAPE = "same", "missing", "extra", "shape-mismatch"
_FIX = "the upstream checkpoint changed; reconvert"


@dataclass(frozen=True)
class Source:
    """A resolved ``--source``: the directory holding config.json, and for a Hub repo id, the
    repo, the revision asked for and the commit it resolved to."""

    arg: str
    path: Path
    config: DrafterConfig
    repo: str | None = None
    revision: str | None = None
    commit: str | None = None

    @property
    def label(self) -> str:
        """How messages name it: ``ORG/NAME@REV`` (the commit when no revision was given), or the path."""
        if self.repo is None:
            return self.arg
        return f"{self.repo}@{self.revision or (self.commit or 'main')[:8]}"

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "repo": self.repo, "revision": self.revision, "commit": self.commit,
                "path": str(self.path), "config": str(self.config.path)}


def resolve_source(arg: str | Path, *, progress: bool = True) -> Source:
    """``arg`` as a Source: a local checkpoint dir (or its config.json) wins over a Hub repo id
    ``ORG/NAME[@REV]``, of which config.json alone is fetched.

    Raises:
        InputError: no such local path, and not a repo id.  HubError: the repo id cannot be resolved.
        ConfigError: no config.json there, or not a DFlash drafter's.
    """
    from ..config import parse_config
    from ..config.deepseek_v4 import is_dsv4_dspark
    from ..config.values import read_config_json
    from ..hub import DRAFTER_CONFIG_FILES, parse_repo_id, resolve_dir, snapshot_of

    text = str(arg)
    path = resolve_dir(text, flag="--source", allow_patterns=DRAFTER_CONFIG_FILES, progress=progress)
    from_hub = path != Path(text)
    if not from_hub and not path.exists():
        raise InputError(f"--source {text}: no such directory, and not a Hugging Face repo id ORG/NAME[@REVISION]; "
                         "pass the drafter checkpoint the GGUF was converted from")
    try:
        raw, cfg_path = read_config_json(path, "not found; --source needs the drafter checkpoint's config.json "
                                               "(the dir it was converted from, or ORG/NAME[@REVISION])")
        if is_dsv4_dspark(raw):  # its draft's shapes come from the weights' index, not from config.json alone
            raise ConfigError(f"{cfg_path}: a DeepSeek-V4 checkpoint carrying a DSpark draft: --source compares "
                              "DFlash/DSpark drafter configs; compare the file with the checkpoint itself: "
                              f"dflash-gguf compare-weights {text} FILE.gguf")
        cfg = parse_config(raw, cfg_path)
    except ConfigError as exc:
        raise ConfigError(f"--source {text}: {exc}") from None
    if not from_hub:
        return Source(text, path, cfg)
    repo, rev = parse_repo_id(text) or (text, None)
    snap = snapshot_of(path)
    return Source(text, path, cfg, repo, rev, None if snap is None else snap.commit)


@dataclass(frozen=True)
class TensorResult:
    """One tensor: the ne convert would write for the source's config.json against the file's
    (None: absent on that side)."""

    name: str
    status: str  # SAME | MISSING (the source's only) | EXTRA (the file's only) | SHAPE
    file_ne: tuple[int, ...] | None
    source_ne: tuple[int, ...] | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status,
                "file_ne": None if self.file_ne is None else list(self.file_ne),
                "source_ne": None if self.source_ne is None else list(self.source_ne)}


@dataclass(frozen=True)
class SourceComparison:
    source: Source
    constants: tuple[ConstantComparison, ...] = ()
    tensors: tuple[TensorResult, ...] = ()
    problem: str | None = None  # why nothing was compared (not a drafter, convert refuses the config)

    @property
    def matches(self) -> bool:
        return self.problem is None and all(c.passed for c in self.constants) and all(
            t.status == SAME for t in self.tensors)

    @property
    def summary(self) -> str:
        where = f"{self.source.label}'s config.json"
        if self.problem is not None:
            return f"not compared with {where}: {self.problem}"
        nc, nt = len(self.constants), len(self.tensors)
        if self.matches:
            return f"matches {where} ({nc} constants, {nt} tensors)"
        bad_c = sum(not c.passed for c in self.constants)
        bad_t = sum(t.status != SAME for t in self.tensors)
        return f"differs from {where}: {bad_c} of {nc} constants, {bad_t} of {nt} tensors"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source.to_json(), "matches": self.matches, "summary": self.summary,
                "problem": self.problem, "constants": [c.to_json() for c in self.constants],
                "tensors": [t.to_json() for t in self.tensors]}


def compare_source(h: GGUFHeader, view: DrafterView, src: Source) -> tuple[SourceComparison, list[Finding]]:
    """The file ``h`` (its drafter view, as ``run_checks`` works it out) against ``src``: the
    comparison, and one finding per mismatch."""
    label = src.label
    if view.fmt is None:
        problem = f"architecture {show(h.arch or '')!r} is not a DFlash drafter"
        return SourceComparison(src, problem=problem), [_f(
            h, "source-not-drafter", f"{problem}; --source compares a drafter GGUF with the config.json of the "
                                     f"checkpoint it was converted from ({label})")]
    if view.meta is None:  # drafter-format already says why; nothing to compare against
        return SourceComparison(src, problem=f"its DFlash keys do not parse ({view.problem})"), []
    from ..fileio.gguf_reader import GGUFFile

    f = GGUFFile(h)
    try:
        constants, expected, th = _expected(src.config, view.fmt, f, view.meta)
    except DflashError as exc:  # convert itself refuses this config.json for the file's format
        msg = str(exc).removeprefix(f"{src.config.path.parent}: ").removeprefix(f"{src.config.path}: ")
        return SourceComparison(src, problem=f"convert refuses it: {msg}"), [_f(
            h, "source-config", f"convert cannot make a {view.fmt.name} file from {label}'s config.json: {msg}")]
    tensors = _compare_tensors(expected, {t.name: _ne(t.shape_ne) for t in h.tensors})
    cmp = SourceComparison(src, tuple(constants), tuple(tensors))
    findings = [_constant_finding(h, c, view.fmt, label) for c in constants if not c.passed]
    findings += _tensor_findings(h, tensors, src.config, view.fmt, th, label)
    return cmp, findings


def _expected(cfg: DrafterConfig, fmt: Format, f: GGUFFile, meta: DrafterMeta):
    """(the constants compared, the tensors ``convert`` would write as {name: ne}, the target
    hidden size taken from the file)."""
    from ..compare.constants import compare_constants
    from ..convert.plan import build_plan, route_tensors
    from ..formats.meta import MASK_ID, ROPE_SECTIONS

    th = meta.n_target_features // max(len(meta.taps), 1)
    with ExitStack() as stack:
        inventory = _stand_ins(cfg, fmt, f, th, stack)
        routes = route_tensors(cfg, fmt, inventory, target_hidden=th)
        constants = compare_constants(cfg, fmt, routes, f, meta)
        # Again with the shapes config.json implies (the first pass decides a family's shapes, a
        # DSpark rank from its tensors), so build_plan checks nothing but the config itself.
        # A family may expect more (Gemma4's sandwich norms) or less (its v_proj) than the shared rules.
        shapes = {**routes.family.optional, **routes.expected}
        unknown = set(routes.unknown)
        inventory = [_reshaped(t, shapes.get(n) or _optional_shape(n, t.shape, cfg))
                     for n, t in routes.by_name.items() if n not in unknown]
        inventory += [_tensor(n, s, cfg.path) for n, s in routes.expected.items() if n not in routes.by_name]
        arch = f.arch or ""
        plan = build_plan(cfg, fmt, inventory, target_hidden=th,
                          tokenizer=[kv for k, kv in f.kvs.items() if k.startswith("tokenizer.") and k != MASK_ID],
                          target_mrope=f"{arch}.{ROPE_SECTIONS}" in f.kvs)
    return constants, {t.dst: _ne(tuple(reversed(t.shape))) for t in plan.tensors}, th


def _stand_ins(cfg: DrafterConfig, fmt: Format, f: GGUFFile, th: int, stack: ExitStack) -> list:
    """The checkpoint as config.json describes it, plus what only its weights decide, read off
    the file: the optional embeddings / head and, for DSpark, its heads."""
    from ..convert.plan import expected_shapes
    from ..formats.names import D2T, DSPARK_GLOBAL, OPTIONAL_TENSORS

    out = {n: _tensor(n, s, cfg.path) for n, s in expected_shapes(cfg, th).items()}
    kept = set(OPTIONAL_TENSORS) | (set(DSPARK_GLOBAL) if cfg.dspark is not None else set())
    for t in f.tensors:
        n = fmt.source_name(t.name)
        if n in kept and n not in out:
            out[n] = _tensor(n, t.shape, cfg.path)
    if cfg.dspark is not None and (D2T in {t.name for t in f.tensors} or cfg.dspark.reduced_vocab):
        out[D2T] = _identity_d2t(cfg.dspark.draft_vocab_size, stack)
    # the DSpark heads config.json requires (a reduced vocabulary, an untied Gemma4): expected
    # whether or not the file has them, so that a file without one is a missing tensor
    spec = cfg.dspark
    if spec is not None and "lm_head.weight" not in out and (
            spec.reduced_vocab or (spec.gemma4 and cfg.tie_word_embeddings is not True)):
        out["lm_head.weight"] = _tensor("lm_head.weight", (spec.draft_vocab_size, cfg.hidden_size), cfg.path)
    return list(out.values())


def _identity_d2t(n: int, stack: ExitStack):
    """A d2t the plan can validate: its values belong to the weights, not config.json, but the
    DSpark plan reads and checks them. All zeros (offsets: the identity map) in a sparse file."""
    from ..fileio.safetensors import SourceTensor
    from ..formats.names import D2T

    d = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dflash-source-")))
    with open(d / "d2t", "wb") as fh:
        fh.truncate(8 * n)
    return SourceTensor(D2T, "I64", (n,), d / "d2t", 0, 8 * n)


def _tensor(name: str, shape: tuple[int, ...], file: Path, dtype: str = "F32"):
    from ..fileio.safetensors import SourceTensor

    numel = 1
    for d in shape:
        numel *= d
    return SourceTensor(name, dtype, tuple(shape), file, 0, (8 if dtype == "I64" else 4) * numel)


def _reshaped(t, shape: tuple[int, ...]):
    return t if t.shape == shape else _tensor(t.name, shape, t.file, t.dtype)


def _optional_shape(name: str, shape: tuple[int, ...], cfg: DrafterConfig) -> tuple[int, ...]:
    from ..formats.names import OPTIONAL_TENSORS

    # an embedding / head the file has: its rows are the file's, its width the config's hidden size
    return (shape[0], cfg.hidden_size) if name in OPTIONAL_TENSORS and len(shape) == 2 else shape


def _ne(ne: tuple[int, ...]) -> tuple[int, ...]:
    """ggml order without trailing 1s: llama-quantize writes a [n, 1] tensor as [n]."""
    ne = tuple(ne)
    while len(ne) > 1 and ne[-1] == 1:
        ne = ne[:-1]
    return ne


def _compare_tensors(expected: dict[str, tuple[int, ...]], file: dict[str, tuple[int, ...]]) -> list[TensorResult]:
    out = []
    for name, ne in expected.items():
        have = file.get(name)
        status = MISSING if have is None else SAME if have == ne else SHAPE
        out.append(TensorResult(name, status, have, ne))
    out += [TensorResult(name, EXTRA, ne, None) for name, ne in file.items() if name not in expected]
    return out


def _f(h: GGUFHeader, code: str, msg: str, where: str = "") -> Finding:
    return Finding(Severity.ERROR, code, msg, where, str(h.path), CATEGORY)


def _constant_finding(h: GGUFHeader, c: ConstantComparison, fmt: Format, label: str) -> Finding:
    from ..compare.report import CONST_EXTRA, CONST_MISSING

    src = c.source[len("config."):] if c.source.startswith("config.") and not c.source.startswith("config.json") \
        else c.source
    cfg = f"{label}'s config.json"
    fact = {k.key.format(a=h.arch): k.fact for k in fmt.dflash_keys}.get(c.key)
    where = f"key {show(c.key)}"
    if c.status == CONST_MISSING:
        return _f(h, "source-constant", f"{c.key}: not in the file; {cfg} gives {_show(c.ours)} ({src}) — {_FIX}", where)
    if c.status == CONST_EXTRA:
        return _f(h, "source-constant", f"{c.key}: the file has {_show(c.theirs)}; convert writes no such key for "
                                        f"{cfg} ({src}) — {_FIX}", where)
    if c.key == f"{h.arch}.block_count":
        return _f(h, "source-layers", f"block count: the file has {c.theirs} layers, {cfg} has {c.ours} ({src}) — "
                                      f"{_FIX}", where)
    if fact == "taps":
        ours, theirs = ([i - fmt.tap_offset for i in v] for v in (c.ours, c.theirs))
        return _f(h, "source-taps", f"taps: the file has {len(theirs)} target layers {_show(theirs)}, {cfg} has "
                                    f"{len(ours)} {_show(ours)} ({src}; z-lab ids) — {_FIX}", where)
    if fact == "n_taps":
        return _f(h, "source-taps", f"tap count: the file has {c.theirs}, {cfg} has {c.ours} ({src}) — {_FIX}", where)
    return _f(h, "source-constant", f"{c.key}: the file has {_show(c.theirs)}, {cfg} gives {_show(c.ours)} ({src}) "
                                    f"— {_FIX}", where)


def _tensor_findings(h: GGUFHeader, tensors: list[TensorResult], cfg: DrafterConfig, fmt: Format, th: int,
                     label: str) -> list[Finding]:
    """One finding per tensor, except a layer wholly on one side: one finding for the layer
    (a drafter re-published two layers deeper is two lines, not two dozen)."""
    from ..formats.names import BLK_RE

    layers: dict[int, list[TensorResult]] = {}
    for t in tensors:
        m = BLK_RE.match(t.name)
        if m:
            layers.setdefault(int(m.group(1)), []).append(t)
    whole = {i: ts[0].status for i, ts in layers.items()
             if ts[0].status in (MISSING, EXTRA) and all(t.status == ts[0].status for t in ts)}
    out, src = [], f"{label}'s config.json"
    for i, status in sorted(whole.items()):
        ts, where = layers[i], f"tensor blk.{i}.*"
        names = ", ".join(t.name.split(".", 2)[2] for t in ts)
        if status == MISSING:
            out.append(_f(h, "source-tensor-missing", f"layer blk.{i}: not in the file; {src} implies its {len(ts)} "
                                                      f"tensors ({names}) — {_FIX}", where))
        else:
            out.append(_f(h, "source-tensor-extra", f"layer blk.{i}: in the file ({len(ts)} tensors), but {src} "
                                                    f"implies {cfg.num_hidden_layers} layers — {_FIX}", where))
    skip = {id(t) for i in whole for t in layers[i]}
    out += [_tensor_finding(h, t, cfg, fmt, th, label) for t in tensors if t.status != SAME and id(t) not in skip]
    return out


def _tensor_finding(h: GGUFHeader, t: TensorResult, cfg: DrafterConfig, fmt: Format, th: int, label: str) -> Finding:
    where = f"tensor {show(t.name)}"
    src = f"{label}'s config.json"
    if t.status == MISSING:
        return _f(h, "source-tensor-missing", f"tensor {show(t.name)}: not in the file; {src} implies it, ne "
                                              f"{list(t.source_ne)} — {_FIX}", where)
    if t.status == EXTRA:
        return _f(h, "source-tensor-extra", f"tensor {show(t.name)}: in the file (ne {list(t.file_ne)}), but {src} "
                                            f"implies no such tensor — {_FIX}", where)
    why = f" ({cfg.n_taps} taps × target hidden {th})" if t.name == fmt.fc_name else ""
    return _f(h, "source-tensor-shape", f"tensor {show(t.name)}: the file has ne {list(t.file_ne)}, {src} implies "
                                        f"ne {list(t.source_ne)}{why} — {_FIX}", where)


def _show(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        items = list(v)
        return f"[{', '.join(_show(x) for x in items[:12])}{', …' if len(items) > 12 else ''}]"
    if isinstance(v, float):
        return format(v, ".9g")
    return repr(v) if isinstance(v, str) else str(v)


