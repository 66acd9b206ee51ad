"""A table of functions by name, the way the method's variants are chosen from the config: advantage estimators
(`algorithm.advantage_mode`) and policy losses (`algorithm.policy_loss`). Adding a variant is registering one
function; the config lists the registered names in its errors. Pure Python: nothing here imports torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """Functions of one kind by name; `kind` names them in errors (e.g. "advantage estimator")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """A decorator that registers the function as `name`; a name is registered once."""

        def register(function: F) -> F:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered already")
            self._entries[name] = function
            return function

        return register

    def unregister(self, name: str) -> None:
        """Forget `name` (a test's own entry, once the test is done)."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def get(self, name: str) -> F:
        """The function registered as `name`."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r} (registered: {', '.join(self.names())})")
        return self._entries[name]
