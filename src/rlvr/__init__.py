"""rlvr: reinforcement learning with verifiable rewards for language models."""

from rlvr.library_warnings import silence_library_deprecations

__version__ = "0.1.0"

silence_library_deprecations()  # the libraries' notices every run printed; rlvr's own warnings stay
