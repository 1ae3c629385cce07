"""convert/family.py: the one seam a drafter family changes the plan through. The default
changes nothing; a family is a subclass, and what it decides reaches the plan (and, through
``route_tensors``, compare-weights) without a hook in the shared code."""
from __future__ import annotations

from dflash_gguf.convert.dspark import DSparkPlan
from dflash_gguf.convert.family import PlanExtension
from dflash_gguf.convert.plan import expected_shapes, plan_extension, route_tensors
from dflash_gguf.formats import FORMATS
from dflash_gguf.formats.meta import DrafterMeta

from tests.convert.test_plan import _config, _inventory, _tensor

FMT = FORMATS["llama.cpp"]


def test_the_default_extension_changes_nothing(tmp_path):
    cfg = _config(tmp_path)
    expected = expected_shapes(cfg, 64)
    by_name = {t.name: t for t in _inventory(cfg, tmp_path)}
    ext = plan_extension(cfg, expected, by_name, str(tmp_path))
    assert type(ext) is PlanExtension
    assert ext.expected == expected and ext.by_name == by_name
    assert all(ext.classify(n) is None for n in by_name)
    assert all(ext.gguf_name(FMT, n) == FMT.gguf_name(n) for n in by_name)
    assert ext.generated() == ([], [])
    meta = DrafterMeta(taps=(1,), block_size=16, mask_token_id=0, n_target_features=64)
    ext.apply(meta)
    assert meta.hparams == [] and not meta.dspark


def test_routes_follow_the_extension_not_the_shared_rules(tmp_path, monkeypatch):
    """A family that claims a tensor and renames another: the routes (what convert writes and
    compare pairs) take both decisions from the extension alone."""

    class Claims(PlanExtension):
        def classify(self, name):
            return "dropped" if name == "extra.weight" else super().classify(name)

        def gguf_name(self, fmt, name):
            return "renamed.weight" if name == "norm.weight" else fmt.gguf_name(name)

    cfg = _config(tmp_path)
    inv = [*_inventory(cfg, tmp_path), _tensor("extra.weight", (4,), tmp_path)]
    plain = route_tensors(cfg, FMT, inv, target_hidden=64)
    assert plain.unknown == ["extra.weight"]  # no rule knows it: convert refuses it

    import dflash_gguf.convert.plan as plan_mod

    def chooser(cfg, expected, by_name, where):
        ext = Claims(dict(expected), dict(by_name))
        ext.claimed["extra.weight"] = "a family's own tensor"
        return ext

    monkeypatch.setattr(plan_mod, "plan_extension", chooser)
    routes = route_tensors(cfg, FMT, inv, target_hidden=64)
    assert routes.unknown == [] and ("extra.weight", "a family's own tensor") in routes.dropped
    assert routes.gguf_name(FMT, "norm.weight") == "renamed.weight"
    assert routes.written == sorted(routes.expected)


def test_dspark_is_chosen_by_the_config(tmp_path):
    cfg = _config(tmp_path, architectures=["DSparkDraftModel"], markov_rank=0)
    by_name = {t.name: t for t in _inventory(cfg, tmp_path)}
    ext = plan_extension(cfg, expected_shapes(cfg, 64), by_name, str(tmp_path))
    assert isinstance(ext, DSparkPlan)
    meta = DrafterMeta(taps=(1,), block_size=16, mask_token_id=0, n_target_features=64)
    ext.apply(meta)
    assert meta.dspark and {s for s, *_ in meta.hparams} == {"sample_from_anchor", "has_confidence_head"}
