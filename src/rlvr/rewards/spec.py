"""Which rewards to compute, with what weight and params — checked when the config is loaded.

A :class:`RewardSpec` resolves its reward in the *parent* process once, so every mistake a user can
make in a config (unknown reward, misspelt or missing param, a value of the wrong type, a gate that
names no component) is an :class:`RlvrError` at start-up rather than an error on every call inside a
worker. It also inspects the function's signature once, to learn which of the pool-supplied keyword
arguments (token counts, finish reasons, logprobs) the pool should pass.
"""

from __future__ import annotations

import inspect
import math
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, model_validator

from rlvr.errors import RlvrError
from rlvr.rewards.registry import RewardFn, get_reward, is_group_reward, reward_check, reward_preload

# Keyword arguments the pool supplies itself (from what the trainer passes to ``score``); users
# cannot set them in params. A group reward receives each as a list, one entry per completion.
POOL_KWARGS = ("completion_tokens", "finish_reason", "token_logprobs", "top_logprobs", "token_self_certainty")


@dataclass(frozen=True)
class CallSpec:
    """What a worker process needs to find and call one reward: plain, picklable data."""

    label: str
    name: str
    module: str | None  # where a registered reward was defined; workers import it to register it
    params: dict[str, Any]
    pool_kwargs: tuple[str, ...]  # which of POOL_KWARGS the function accepts
    group: bool = False  # a group reward: called once per group with the list of completions


class RewardSpec(BaseModel):
    """One reward in the mix: ``total = sum(weight * value)`` over all specs.

    ``name`` is a registered reward (see :func:`rlvr.rewards.list_rewards`) or an import path
    ``"package.module:function"``. ``label`` names the component in results and logs; it defaults
    to ``name`` and must be unique within a pool (set it to use one reward twice).

    ``gate`` makes this component conditional: it counts only when the component labelled ``gate``
    scored at least ``gate_min`` (e.g. a format bonus that is paid only for correct answers, so the
    policy cannot farm it on wrong ones). A gated component that fails its gate is reported as 0.0;
    the pool checks that the gate names another spec and that gates do not form a cycle.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registered reward name or import path 'package.module:function'.")
    weight: float = Field(1.0, description="Multiplier of this reward in the total.")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the reward.")
    label: str | None = Field(None, description="Component name in results; defaults to `name`.")
    gate: str | None = Field(
        None, description="Label of another component that must pass for this one to count."
    )
    gate_min: float = Field(1.0, description="The gate passes when its component is >= this value.")

    _fn: RewardFn = PrivateAttr()
    _pool_kwargs: tuple[str, ...] = PrivateAttr(())

    @model_validator(mode="after")
    def _resolve(self) -> RewardSpec:
        if not math.isfinite(self.weight):
            raise RlvrError(f"reward {self.name!r}: weight must be a finite number, got {self.weight}")
        fn = get_reward(self.name)
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise RlvrError(f"reward {self.name!r}: cannot inspect its signature ({exc})") from exc
        self.params = _checked_params(self.name, fn, signature, self.params)
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
        self._fn = fn
        self._pool_kwargs = tuple(k for k in POOL_KWARGS if accepts_any or _accepts_keyword(signature, k))
        if self.gate is not None and self.gate == self.key:
            raise RlvrError(f"reward {self.key!r} cannot gate itself")
        check = None if ":" in self.name else reward_check(self.name)
        if check is not None:
            try:
                check(self.params)
            except RlvrError:
                raise
            except Exception as exc:
                raise RlvrError(f"reward {self.name!r} cannot run here: {exc}") from exc
        return self

    @property
    def group(self) -> bool:
        """True for a group reward (see :func:`rlvr.rewards.register_group_reward`)."""
        return is_group_reward(self._fn)

    @property
    def key(self) -> str:
        """The component name this spec reports under."""
        return self.label or self.name

    @property
    def preload(self) -> tuple[str, ...]:
        """Modules worker processes should import before running this reward."""
        return () if ":" in self.name else reward_preload(self.name)

    def call_spec(self) -> CallSpec:
        """The picklable description a worker process uses to resolve and call the reward."""
        module = None if ":" in self.name else getattr(self._fn, "__module__", None)
        return CallSpec(
            label=self.key,
            name=self.name,
            module=module,
            params=dict(self.params),
            pool_kwargs=self._pool_kwargs,
            group=self.group,
        )


def check_gates(specs: list[RewardSpec]) -> None:
    """Every gate names another spec's label, and following gates never loops back."""
    gates = {s.key: s.gate for s in specs}
    for spec in specs:
        if spec.gate is not None and spec.gate not in gates:
            raise RlvrError(
                f"reward {spec.key!r}: gate {spec.gate!r} is not a reward label here; labels: "
                f"{', '.join(gates)}"
            )
        seen = {spec.key}
        current = spec.gate
        while current is not None:
            if current in seen:
                raise RlvrError(f"reward gates form a cycle through {sorted(seen)}")
            seen.add(current)
            current = gates[current]


def _accepts_keyword(signature: inspect.Signature, name: str) -> bool:
    parameter = signature.parameters.get(name)
    return parameter is not None and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY


def _checked_params(
    name: str, fn: RewardFn, signature: inspect.Signature, params: dict[str, Any]
) -> dict[str, Any]:
    """Validate ``params`` against ``fn``'s keyword parameters; return them type-coerced."""
    reserved = sorted(set(params) & set(POOL_KWARGS))
    if reserved:
        raise RlvrError(f"reward {name!r}: params {reserved} are supplied by the pool and cannot be set")
    # The first two parameters receive (completion, example); the rest are user params.
    candidates = list(signature.parameters.values())[2:]
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in candidates)
    settable = {
        p.name: p
        for p in candidates
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in POOL_KWARGS
    }
    allowed = ", ".join(sorted(settable)) or "(none)"
    unknown = sorted(set(params) - set(settable))
    if unknown and not accepts_any:
        raise RlvrError(f"reward {name!r} has no param {unknown[0]!r}; allowed params: {allowed}")
    missing = sorted(
        k for k, p in settable.items() if p.default is inspect.Parameter.empty and k not in params
    )
    if missing:
        raise RlvrError(f"reward {name!r} needs param {missing[0]!r}; its params: {allowed}")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations only cost us validation
        hints = {}
    checked = dict(params)
    for key, value in params.items():
        if key not in hints:
            continue
        try:
            checked[key] = TypeAdapter(hints[key]).validate_python(value)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise RlvrError(f"reward {name!r} param {key!r}: {reason} (got {value!r})") from None
        except Exception:  # noqa: BLE001 - an annotation pydantic cannot handle is not validated
            continue
    return checked
