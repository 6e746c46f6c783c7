"""Names a spec uses (providers, scorers, loaders) mapped to what they name, imported on first use.

One mechanism for every registry of the package: a built-in is named as a ``module:attr`` string,
so a lower room can name an implementation in a higher one without importing it (the BBH scorer,
the HumanEval loader and each provider load only when a spec uses them), and a user's own is
registered by name, as an object or as a ``module:attr`` string. This module imports nothing of
the package: every room may use it, as it may use ``errors``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def resolve(ref: str) -> Any:
    """The object ``module:attr`` names; ImportError or AttributeError when there is none."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """``name -> T``: the built-ins as ``module:attr`` strings, each imported when first asked for.

    ``adapt(name, found)`` turns what a reference names into the registry's type once, when it is
    imported (a scorer of text alone becomes a scorer of an item); by default it is taken as it is.
    """

    def __init__(self, kind: str, builtin: Mapping[str, str],
                 adapt: Callable[[str, Any], T] | None = None) -> None:
        self.kind = kind  # what a name is, for messages: "provider", "scorer", "loader"
        self._refs: dict[str, str] = dict(builtin)
        self._loaded: dict[str, T] = {}
        self._adapt = adapt

    def register(self, name: str, found: T | str) -> None:
        """Add ``name`` (or replace it): ``found`` itself, or a ``module:attr`` string imported on
        first use."""
        self._loaded.pop(name, None)
        self._refs.pop(name, None)
        if isinstance(found, str):
            self._refs[name] = found
        else:
            self._loaded[name] = found

    def get(self, name: str) -> T | None:
        """What ``name`` names, imported now if it was not yet; None when nothing is registered.
        A reference that does not import raises: a registered name that names nothing is a bug."""
        found = self._loaded.get(name)
        if found is None and name in self._refs:
            raw = resolve(self._refs[name])
            found = self._loaded[name] = raw if self._adapt is None else self._adapt(name, raw)
        return found

    def __getitem__(self, name: str) -> T:
        found = self.get(name)
        if found is None:
            raise KeyError(f"no {self.kind} {name!r}; known: {', '.join(self.names())}")
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._refs or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Every registered name, sorted (for the messages that list them)."""
        return sorted({*self._refs, *self._loaded})
