"""Guards: header-only integrity, drafter, pairing and base-vs-instruct checks."""
