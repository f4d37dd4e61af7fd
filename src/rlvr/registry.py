"""Name → function registries: how the trainer finds estimators, losses and rewards without knowing them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from rlvr.errors import RlvrError

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of functions of one kind (e.g. "advantage estimator")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            if name in self._table and self._table[name] is not fn:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._table[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> F:
        if name not in self._table:
            raise RlvrError(f"unknown {self.kind} '{name}'; allowed: {', '.join(sorted(self._table))}")
        return self._table[name]

    def names(self) -> list[str]:
        return sorted(self._table)

    def __contains__(self, name: str) -> bool:
        return name in self._table


def accepted_context(fn: Callable, context: dict, params: dict, where: str) -> dict:
    """Keyword arguments for ``fn``: the ``context`` entries it accepts, plus the user's ``params``.

    Registered functions declare what they need by naming it (e.g. a loss that wants per-token
    ``entropy`` takes an ``entropy`` argument); the caller offers everything it has. A user param the
    function does not take is an error naming ``where`` (e.g. ``algo.loss_params``), not ignored.
    """
    import inspect

    signature = inspect.signature(fn)
    names = set(signature.parameters)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    unknown = [key for key in params if key not in names and not takes_any]
    if unknown:
        allowed = [n for n, p in signature.parameters.items() if p.default is not inspect.Parameter.empty]
        raise RlvrError(f"{where}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    offered = {key: value for key, value in context.items() if key in names or takes_any}
    return {**offered, **params}
