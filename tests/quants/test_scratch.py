"""quants/scratch.py: the reusable per-thread buffers of the chunk loops (quantize, compare)."""
import threading

import numpy as np

from dflash_gguf.quants.scratch import Scratch


def test_scratch_buffers_are_reused_per_thread_and_grow():
    """The chunk loop's buffers: the same memory chunk after chunk (no page faults per chunk),
    grown when a bigger chunk comes, and never shared between worker threads."""
    sc = Scratch()
    a = sc.get("x", 100, np.float32)
    assert a.dtype == np.float32 and a.size == 100
    b = sc.get("x", 50, np.float32)
    assert np.shares_memory(a, b) and b.size == 50
    c = sc.get("x", 1000, np.float32)
    assert c.size == 1000 and sc.get("x", 10).size == 10 and not np.shares_memory(sc.get("y", 10), c)
    other = {}
    t = threading.Thread(target=lambda: other.setdefault("x", sc.get("x", 10, np.float32)))
    t.start()
    t.join()
    assert not np.shares_memory(other["x"], c)
