"""Fixtures of other test packages for the command-line tests: the bench tests' (the fake
llama-server, drafter copies, its switches) and the compare tests' converted GGUFs. Imported
here, so the test modules use them without importing fixture names."""
from tests.bench.conftest import drafters, fake_bin, fake_env  # noqa: F401  (fixtures)
from tests.compare.conftest import converted  # noqa: F401  (a fixture: GGUFs our convert wrote, once per session)
