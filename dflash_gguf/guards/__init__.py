"""Guards: header-only integrity, drafter, pairing and base-vs-instruct checks.

The check modules register on import (``findings.file_check`` & co.). Python runs this file
before any module of the package, so importing them here fixes one registry order, whatever
is imported first; findings are reported in that order.
"""
from . import file_checks  # noqa: F401  (first: integrity findings before drafter ones)
from . import drafter_checks  # noqa: F401
from . import dspark_checks  # noqa: F401  (after the drafter checks: DSpark findings refine them)
from . import pairing  # noqa: F401
