"""Numbers that ``parity`` (our torch reference) and ``bench`` (the real runtime) both report,
computed in one place so the two read the same way."""
from .acceptance import Acceptance  # noqa: F401
from .kl import KLStats  # noqa: F401
from .spread import Stat, beyond_sigma  # noqa: F401
