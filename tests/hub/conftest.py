"""The Hugging Face cache fixture for the tests of this folder (defined in _cache.py)."""
from tests.hub._cache import hf_cache  # noqa: F401  (a fixture: registered by being here)
