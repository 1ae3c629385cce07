"""The per-case hang guard shared by the fuzz files."""
from __future__ import annotations

import signal
from contextlib import contextmanager


class CaseTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so no ``except Exception`` in the code under test eats it."""


@contextmanager
def time_limit(seconds: float, what: str):
    """Raise CaseTimeout in the body if it runs longer than ``seconds`` (a hang fails the case)."""
    def on_alarm(signum, frame):
        raise CaseTimeout(f"{what}: no answer within {seconds} s (hang?)")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
