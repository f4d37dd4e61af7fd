"""Silence the libraries' deprecation notices that every run printed, and nothing else.

transformers 5 deprecates the ``past_key_values`` keyword (rlvr's decode loop still passes it, as
older transformers versions need) and the ``is_gradient_checkpointing`` property; each warns on
every run, as a ``FutureWarning`` and once more as a log record, though nothing the user can change
causes it. Each is dropped by its exact message and only when it comes from those libraries
(``warnings.filterwarnings`` with ``message=`` and ``module=``; a logging filter on the one logger
that repeats it), so every other warning, rlvr's own included, still shows. Applied when rlvr is
imported (:func:`silence_library_deprecations` is idempotent).
"""

from __future__ import annotations

import logging
import warnings

# where the warnings are attributed: the library's frame, or torch's Module.__call__ (stacklevel=2)
LIBRARY_MODULES = r"(torch|transformers|peft|accelerate)(\.|$)"
DEPRECATIONS = (
    r"`past_key_values` is deprecated",
    r"`is_gradient_checkpointing` is deprecated",
)
# transformers' own logger repeats the first as a log record (logger.warning_once)
LOGGED = {"transformers.utils.generic": ("`past_key_values`/`cache_params` are deprecated",)}


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def silence_library_deprecations() -> None:
    """Drop the known library deprecation notices (:data:`DEPRECATIONS`, :data:`LOGGED`)."""
    for message in DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning, module=LIBRARY_MODULES)
    for name, prefixes in LOGGED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(prefixes))
