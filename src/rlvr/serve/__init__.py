"""``rlvr serve``: the Tinker training API on this machine, backed by rlvr's model, losses and engine.

A client written against the official ``tinker`` SDK (``forward_backward``, ``optim_step``,
``sample``, checkpoints) trains the bundled model on a laptop CPU by pointing the SDK at this server:
``TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-local``. See docs/interop.md.
"""

from rlvr.serve.service import ServeSettings, Service

__all__ = ["ServeSettings", "Service"]
