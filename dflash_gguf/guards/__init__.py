"""Guards: header-only integrity, drafter, pairing and base-vs-instruct checks.

``run.py`` lists the checks, in the order findings are reported (``FILE_CHECKS``,
``MODEL_CHECKS``, ``PAIR_CHECKS``).
"""
