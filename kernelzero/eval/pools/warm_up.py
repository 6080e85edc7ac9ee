"""Warming a pool up: its spare workers started ahead of the first batch, off the caller's thread.

Any pool (the local `Evaluator`, `RayPool`) or a client without a `warm_up` method is accepted;
the Ray pool's actors use it for their own evaluators too.
"""
from __future__ import annotations


def warm_up_in_background(pool) -> None:
    """Start a long-lived pool's spare workers now, off the caller's thread (a trainer or the
    service then pays worker start-up while it loads models, not in its first batch)."""
    if hasattr(pool, "warm_up"):
        import threading

        threading.Thread(target=pool.warm_up, name="kz-warm-up", daemon=True).start()
