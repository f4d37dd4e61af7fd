"""Optional packages that config keys need (pyproject extras), checked when the config is validated."""

from __future__ import annotations

import importlib.util

EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # module -> pyproject extra


def require(module: str) -> None:
    """Raise ``ValueError`` (a validation error on the key that needs it) when ``module`` is absent."""
    if importlib.util.find_spec(module) is None:
        extra = EXTRAS.get(module, module)
        raise ValueError(
            f"needs the '{module}' package, which is not installed: "
            f"pip install 'rlvr[{extra}]' (or pip install {module})"
        )
