"""The bench tests' fixtures (the fake llama-server, drafter copies, its switches) for `bench`'s
command-line tests: imported here, so the test modules use them without importing fixture names."""
from tests.bench.conftest import drafters, fake_bin, fake_env  # noqa: F401  (fixtures)
