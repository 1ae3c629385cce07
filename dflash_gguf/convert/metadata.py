"""The ``general.*`` keys and the default file name, as mainline's ``convert_hf_to_gguf.py`` decides them.

Mainline (``ModelBase.prepare_metadata``) runs gguf-py's ``Metadata.load(--metadata, model dir,
--model-name, total_params)`` over the model card's front matter (README.md), config.json,
generation_config.json and the directory name; falls back to the directory name for
``general.name``; labels the size from ``GGUFWriter.get_total_parameter_count()`` over every
tensor it writes; then ``Metadata.set_gguf_meta_model(writer)`` adds the keys. We call the same
gguf-py code on the same inputs, so its rules (name heuristics, license lists, base-model repo
urls...) are never copied here and stay in step with gguf-py.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import sys
import types
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import ConfigError, UsageError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.types import KV
from ..hub import Snapshot, snapshot_of

@dataclass(frozen=True)
class MetadataInputs:
    """What mainline reads the authorship metadata from: the drafter dir as given on the command
    line (its README.md, config.json, generation_config.json and name), ``--metadata`` and
    ``--model-name``; ``source``, the Hub snapshot the dir is (found from its path when None)."""

    model_dir: Path
    override: Path | None = None
    model_name: str | None = None

    @property
    def source(self) -> Snapshot | None:
        return snapshot_of(self.model_dir)


def parameter_counts(tensors: Iterable[tuple[str, Sequence[int]]]) -> tuple[int, int, int, int]:
    """(total, shared, expert, expert count) of the tensors written (name, shape): the rule of
    gguf-py's ``GGUFWriter.get_total_parameter_count``, restated because gguf-py's writer module
    imports numpy, which a plain copy never needs (tests hold the two equal). A drafter has no
    LoRA pairs, the one case this leaves out."""
    total = shared = expert = expert_sum = n_expert = 0
    for name, shape in tensors:
        size = prod(shape)
        if "_exps." in name and len(shape) >= 3:
            count = shape[-2 if ".bias" in name else -3]
            expert += size // count
            expert_sum += count
            n_expert += 1
        else:
            shared += size
        total += size
    return total, shared, expert, (expert_sum // n_expert) if n_expert else 0


def size_label(total: int, shared: int, expert: int, expert_count: int) -> str:
    """"140K", "1.2B", "8x7.0B": gguf-py's ``utility.size_label``, restated for the same reason
    (its module imports numpy; tests hold the two equal)."""
    def rounded(n: int) -> str:
        scale, suffix = next((s, x) for s, x in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
                             if n > s or x == "K")
        value = n * (1 / scale)
        digits = max(2 - len(str(round(value)).lstrip("0")), 0)
        return f"{value:.{digits}f}{suffix}"

    if expert_count > 0:
        return f"{expert_count}x{rounded(abs(shared) + abs(expert))}"
    return rounded(abs(total))


@functools.cache
def _gguf_metadata() -> types.ModuleType:
    """gguf-py's own ``gguf.metadata`` module, loaded without running ``gguf/__init__``.

    The package's ``__init__`` imports its writer, reader and numpy (about 0.15 s), while
    ``gguf.metadata`` needs only ``gguf.constants`` and yaml: a plain BF16 copy stays a copy. The
    modules are loaded under a bare package object and removed from ``sys.modules`` again, so a
    later ``import gguf`` still runs the real package. When gguf is imported already, its own
    module is used."""
    if "gguf" in sys.modules:
        return importlib.import_module("gguf.metadata")
    spec = importlib.util.find_spec("gguf")
    bare = types.ModuleType("gguf")
    bare.__path__ = list(spec.submodule_search_locations)  # what submodule imports look in
    sys.modules["gguf"] = bare
    try:
        return importlib.import_module("gguf.metadata")
    finally:
        for name in [n for n in sys.modules if n == "gguf" or n.startswith("gguf.")]:
            del sys.modules[name]


def general_kvs(src: MetadataInputs, tensors: Iterable[tuple[str, Sequence[int]]]) -> list[KV]:
    """The keys ``set_gguf_meta_model`` writes (sampling, name ... tags, languages), in its order.

    As mainline: a Hub snapshot is named after its repo id (``convert_hf_to_gguf.py --remote``),
    otherwise the name falls back to the directory's; the size label counts every tensor written.
    Ours on top: a Hub snapshot's repo and commit as ``general.source.repo_url`` and
    ``general.source.url`` (``https://huggingface.co/ORG/NAME/tree/COMMIT``), unless ``--metadata``
    sets them.

    Raises:
        ConfigError: the model card's front matter cannot be read.
        UsageError: the ``--metadata`` file is not JSON.
    """
    gm = _gguf_metadata()
    counts = parameter_counts(tensors)
    total = counts[0]
    _require_objects(src)
    try:
        md = gm.Metadata.load(src.override, src.model_dir, src.model_name, total)
        override = gm.Metadata.load_metadata_override(src.override)
        gen = gm.Metadata.load_generation_config(src.model_dir)
    except OSError as exc:
        raise ConfigError(f"cannot read the model metadata of {src.model_dir}: {exc}") from None
    except json.JSONDecodeError as exc:  # config.json was read before: the --metadata file, or generation_config.json
        if src.override is not None:
            raise UsageError(f"--metadata {src.override} (or {src.model_dir}/generation_config.json): not JSON "
                             f"({exc})") from None
        raise ConfigError(f"{src.model_dir}/generation_config.json: not JSON ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the model metadata of {src.model_dir} is not UTF-8 text ({exc})") from None
    except Exception as exc:  # yaml's own errors: README.md's front matter is not YAML
        if not type(exc).__module__.startswith("yaml"):
            raise
        problem = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip() and "^" not in line)
        raise ConfigError(f"{Path(src.model_dir) / 'README.md'}: the model card's front matter is not valid "
                          f"YAML ({problem})") from None
    keys = gm.Keys.General
    # llama.cpp's own gguf-py also reads transformers' name for the repeat penalty; PyPI's gguf
    # 0.19.0 reads only "penalty_repeat". Same precedence: penalty_repeat, then --metadata.
    if "penalty_repeat" not in gen and "repetition_penalty" in gen and keys.SAMPLING_PENALTY_REPEAT not in override:
        md.sampling_penalty_repeat = gen["repetition_penalty"]
    snap = src.source
    if snap is not None:
        md.name = snap.repo_id  # mainline --remote: the repo id, over the card and --model-name
        if keys.SOURCE_REPO_URL not in override:
            md.source_repo_url = snap.repo_url
        if keys.SOURCE_URL not in override:
            md.source_url = snap.url
    if md.name is None:  # mainline: "Fallback to model directory name"
        md.name = Path(src.model_dir).name
    if md.size_label is None and total > 0:
        md.size_label = size_label(*counts)
    rec = _Recorder(keys)
    try:
        md.set_gguf_meta_model(rec)
    except _BadValue as exc:  # gguf-py writes whatever it was given; a GGUF value has one type
        where = f"{src.model_dir / 'README.md'}'s front matter" + (
            f" or --metadata {src.override}" if src.override is not None else "")
        raise ConfigError(f"{exc.key} = {exc.value!r}: {exc.want}; fix it in {where}") from None
    return list(rec.kvs.values())


def _require_objects(src: MetadataInputs) -> None:
    """gguf-py reads ``--metadata`` and generation_config.json with ``.get``: each must be a JSON
    object, said in one line here rather than as an AttributeError there."""
    files = [(src.override, UsageError, "--metadata")] if src.override is not None else []
    gen = Path(src.model_dir) / "generation_config.json"
    if gen.is_file():
        files.append((gen, ConfigError, str(gen)))
    for path, error, name in files:
        try:
            value = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # Metadata.load's own read reports it, in general_kvs's words
        if not isinstance(value, dict):
            raise error(f"{name}{'' if name == str(path) else f' {path}'}: a JSON object of keys is expected, "
                        f"not a {type(value).__name__}")


class _BadValue(Exception):
    def __init__(self, key: str, value: Any, want: str) -> None:
        super().__init__(key)
        self.key, self.value, self.want = key, value, want


# The types gguf-py's GGUFWriter writes each general key with (its add_* methods); everything else is
# a string. Restated (that module imports numpy); tests hold this recorder equal to the real writer.
_INT32 = {"SAMPLING_TOP_K", "SAMPLING_PENALTY_LAST_N", "SAMPLING_MIROSTAT"}
_UINT32 = {"BASE_MODEL_COUNT", "DATASET_COUNT"}
_ARRAYS = {"TAGS", "LANGUAGES"}


class _Recorder:
    """Stands in for the ``GGUFWriter`` that ``Metadata.set_gguf_meta_model`` writes to.

    Each ``add_<field>(value)`` / ``add_<field>(index, value)`` writes ``Keys.General.<FIELD>``
    (formatted with the index), as the writer's methods do; empty strings and arrays are skipped as
    the writer skips them, and a repeated key keeps its first place with the last value, as the
    writer's dict does.
    """

    def __init__(self, keys: Any) -> None:
        self.keys = keys
        self.kvs: dict[str, KV] = {}

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("add_"):
            raise AttributeError(name)
        field = name[4:].upper()
        key = getattr(self.keys, field)  # a gguf-py with a key this does not know fails here, loudly

        def add(*args: Any) -> None:
            *index, value = args
            self._add(key.format(id=index[0]) if index else key, field, value)

        return add

    def _add(self, key: str, field: str, value: Any) -> None:
        if field in _ARRAYS:
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise _BadValue(key, value, "a list of strings is expected")
            if len(value) == 0:
                return
            kv = KV(key, list(value), T.ARRAY, T.STRING)
        elif field in _INT32 or field in _UINT32 or (field.startswith("SAMPLING_") and field != "SAMPLING_SEQUENCE"):
            integer = field in _INT32 or field in _UINT32
            if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
                raise _BadValue(key, value, "an integer is expected" if integer else "a number is expected")
            kv = (KV(key, int(value), T.INT32 if field in _INT32 else T.UINT32) if integer
                  else KV(key, float(value), T.FLOAT32))
        else:
            if not value:
                return
            if not isinstance(value, str):
                raise _BadValue(key, value, "a string is expected")
            kv = KV(key, value, T.STRING)
        self.kvs[key] = kv


# --- the output file name -----------------------------------------------------------------------

def output_type(kvs: Sequence[KV]) -> str:
    """The encoding part of mainline's names ("BF16", "Q8_0"): its ``ftype.name.partition("_")[2]``,
    from the file's ``general.file_type``."""
    import gguf

    ft = next((kv.value for kv in kvs if kv.key == "general.file_type"), None)
    if ft is None:
        return ""
    try:
        return gguf.LlamaFileType(int(ft)).name.partition("_")[2]
    except ValueError:  # a file type gguf-py does not name
        return str(ft)


def default_name(kvs: Sequence[KV]) -> str:
    """``{Name}-{Size}-{Type}.gguf`` as mainline names a conversion written without ``--outfile``
    (``gguf.naming_convention`` over the file's own ``general.*`` keys)."""
    import gguf

    g = {kv.key: kv.value for kv in kvs}
    return gguf.naming_convention(g.get("general.name"), g.get("general.basename"), g.get("general.finetune"),
                                  g.get("general.version"), g.get("general.size_label"), output_type(kvs)) + ".gguf"


def output_path(requested: str | Path | None, model_dir: str | Path, kvs: Sequence[KV]) -> Path:
    """Where mainline would write: no ``--outfile`` → ``default_name`` inside the model dir, or for
    a Hub snapshot ``ORG-NAME-{ftype}.gguf`` in the working directory (``--remote``: never inside
    the cache); an existing directory → ``default_name`` inside it; else the path with ``{ftype}`` /
    ``{outtype}`` (lower case) and ``{FTYPE}`` / ``{OUTTYPE}`` (upper case) filled in
    (``gguf.fill_templated_filename``)."""
    import gguf

    snap = snapshot_of(model_dir)
    if requested is None and snap is not None:
        requested = Path(snap.repo_id.replace("/", "-") + "-{ftype}.gguf")
    where = Path(model_dir if requested is None else requested)
    try:
        is_dir = where.is_dir()
    except OSError:  # a name too long to stat: the output checks say so
        is_dir = False
    if is_dir:
        return where / default_name(kvs)
    try:
        return where.parent / gguf.fill_templated_filename(where.name, output_type(kvs))
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"-o {where}: not a file name template mainline accepts ({exc!r}); "
                          "the placeholders are {ftype}, {outtype}, {FTYPE} and {OUTTYPE}") from None
