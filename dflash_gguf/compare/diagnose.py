"""Diagnosis of failed tensors: each is re-read and tested against explanations (scaled,
transposed, shape spelled in the wrong convention, swapped with another tensor, or
uncorrelated = a different checkpoint), so a failure names its cause. Also flags outliers
among the tensors of one type."""
from __future__ import annotations

import math
from statistics import median

import numpy as np

from .bands import EXPECTED_FACTOR
from .engine import Pair
from .report import OUT, SHAPE_MISMATCH, TensorComparison
from .sides import Side, dequantize_rows

_SAMPLES = 16384  # values compared per tensor by the swap / correlation tests
_BLOCK = 1 << 16  # values per step of the diagnosis helpers: no full-size temporaries


def diagnose_failures(pairs: list[Pair], notes: list[str]) -> None:
    """Re-read each failed tensor and test explanations; flags name the cause. Any pair's A
    side is a candidate for what a swapped tensor holds."""
    failed = [p for p in pairs if p.row.status in (OUT, SHAPE_MISMATCH)]
    if failed:
        with np.errstate(all="ignore"):  # failed tensors may hold inf/NaN/huge garbage
            _diagnose_each(failed, [p.a for p in pairs], notes, len(pairs))


def _diagnose_each(failed: list[Pair], candidates: list[Side], notes: list[str], n_pairs: int) -> None:
    sample_cache: dict[str, np.ndarray] = {}
    n_uncorrelated = 0
    for p in failed:
        r = p.row
        a, b = p.a, p.b
        if math.prod(a.shape) != math.prod(b.shape):
            n_uncorrelated += 1  # a different architecture / size: counts towards "different checkpoint"
            continue
        limit = max(r.limit or p.band.rel_rms, 1e-6)  # float noise floor for the exact types
        explained = False
        if a.shape == b.shape and r.cosine is not None and r.norm_ratio is not None:
            # wrong scale: y is (nearly) s * x with s != 1; s = x.y / x.x from the main pass
            s = r.cosine * r.norm_ratio
            if abs(s - 1) > limit and _rel(b.values(), a.values(), s) <= limit:
                r.flags.append(f"scaled:x{s:.4g}")
                r.detail = f"values are the source's times {s:.4g}; " + r.detail
                explained = True
        if not explained and len(a.shape) == 2 and (a.shape[0] == a.shape[1] or b.shape == a.shape[::-1]):
            # transposes need whole tensors (memory: both as float32); everything else reads rows
            x, y = a.values(), b.values()
            if y.shape == x.T.shape and _rel(y, x.T) <= EXPECTED_FACTOR * limit:
                r.flags.append("transposed")
                r.detail = f"holds the transpose of {a.name}; " + r.detail
                explained = True
            elif x.shape != y.shape and _rel(y.reshape(x.shape), x) <= EXPECTED_FACTOR * limit:
                r.flags.append("shape-convention")
                r.detail = ("data is in the source's order but the shape is spelled differently (ne not reversed?); "
                            + r.detail)
                explained = True
            del x, y
        if a.shape != b.shape:
            if not explained:
                n_uncorrelated += 1
            continue
        rows = np.unique(np.linspace(0, b.rows - 1, min(b.rows, 64)).astype(np.int64))
        ys = _sample(b, rows)
        if not explained:
            best, best_rel = None, math.inf
            for c in candidates:
                if c.name == a.name or c.shape != b.shape:
                    continue
                if c.name not in sample_cache:
                    sample_cache[c.name] = _sample(c, rows)
                rel = _rel(ys, sample_cache[c.name])
                if rel < best_rel:
                    best, best_rel = c, rel
            if best is not None and best_rel <= EXPECTED_FACTOR * limit:
                r.flags.append(f"swapped-with:{best.name}")
                r.detail = f"holds the values of {best.name}; " + r.detail
                explained = True
        # independent data gives |rho| ~ N(0, 1/sqrt(n)): for tiny tensors (a 16-value norm) 0.5
        # is within chance, so the bar rises to 3 sigma there
        if not explained and abs(_spearman(_sample(a, rows), ys)) < max(0.5, min(0.9, 3 / math.sqrt(ys.size))):
            r.flags.append("uncorrelated")
            r.detail = f"uncorrelated with {a.name} (different checkpoint?); " + r.detail
            n_uncorrelated += 1
    if n_uncorrelated >= 2 and n_uncorrelated * 2 >= n_pairs:
        notes.append(f"{n_uncorrelated} tensors are uncorrelated with their counterparts: the GGUF was probably "
                     "converted from a different checkpoint")


def _sample(side: Side, rows: np.ndarray) -> np.ndarray:
    """Whole rows at evenly spaced row indices (quantized data is only readable by rows),
    thinned to at most _SAMPLES values with a fixed stride, as float32."""
    vals = np.concatenate([dequantize_rows(side.read(int(r), int(r) + 1), side.qtype, 1, side.cols).reshape(-1) for r in rows])
    step = max(1, vals.size // _SAMPLES)
    return vals[::step]


def _rel(y: np.ndarray, x: np.ndarray, scale: float = 1.0) -> float:
    """||y - scale*x|| / ||scale*x|| in float64, block by block (x may be a transposed view)."""
    nd = nx = 0.0
    for u, v in _row_blocks(y, x):
        v *= scale
        nx += float(v @ v)
        u -= v
        nd += float(u @ u)
    return math.sqrt(nd / nx) if nx > 0 else (0.0 if nd == 0 else math.inf)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    n = sa = sb = saa = sbb = sab = 0.0
    for u, v in _row_blocks(a, b):
        n += u.size
        sa, sb = sa + float(u.sum()), sb + float(v.sum())
        saa, sbb, sab = saa + float(u @ u), sbb + float(v @ v), sab + float(u @ v)
    if not n:
        return 0.0
    cov, va, vb = sab - sa * sb / n, saa - sa * sa / n, sbb - sb * sb / n
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else 0.0


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation: unlike Pearson, one garbage block of huge values cannot make a
    damaged tensor look uncorrelated."""
    ra = np.empty(a.size)
    rb = np.empty(b.size)
    ra[np.argsort(a, kind="stable")] = np.arange(a.size)
    rb[np.argsort(b, kind="stable")] = np.arange(b.size)
    return _pearson(ra, rb)


def _row_blocks(*arrays: np.ndarray):
    """Matching row blocks of same-shape arrays (2-D views, possibly transposed/strided)."""
    a0 = arrays[0]
    views = [a.reshape(1, -1) if a.ndim < 2 else a for a in arrays]
    rows = views[0].shape[0]
    step = max(1, _BLOCK // max(1, a0.size // max(rows, 1)))
    for r in range(0, rows, step):
        yield [np.array(v[r:r + step], dtype=np.float64).reshape(-1) for v in views]  # copies: callers write


def flag_outliers(rows: list[TensorComparison]) -> None:
    """Informational: a tensor losing > 3x the median error of its type's tensors."""
    by_type: dict[str, list[TensorComparison]] = {}
    for r in rows:
        if r.rel_rms is not None and math.isfinite(r.rel_rms) and r.type:
            by_type.setdefault(r.type, []).append(r)
    for group in by_type.values():
        if len(group) < 3:
            continue
        m = median(r.rel_rms for r in group)
        for r in group:
            if m > 0 and r.rel_rms > 3 * m:
                r.flags.append("outlier")
