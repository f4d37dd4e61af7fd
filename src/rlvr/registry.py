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
