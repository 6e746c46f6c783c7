"""The scorer registry: ``scorer:`` names in a spec, resolved to functions.

Built-in scorers are named here as ``module:function`` strings and imported on first use, so
the registry depends on no implementation (the BBH scorer and the HumanEval sandbox load only
when a spec uses them). A user's scorer registers itself with ``@pytest_echo_bench.scorer``,
or is named directly as ``module:function``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.scoring.verdict import Scorer, TextScorer, Verdict

# name -> (implementation, whether it compares with the target alone: a TextScorer)
BUILTIN: dict[str, tuple[str, bool]] = {
    "exact": ("pytest_echo_bench.scoring.text:exact", True),
    "numeric": ("pytest_echo_bench.scoring.text:numeric", True),
    "regex": ("pytest_echo_bench.scoring.text:regex", True),
    "choice": ("pytest_echo_bench.scoring.text:choice", True),
    "bbh": ("pytest_echo_bench.suites.bbh:score", True),
    "humaneval": ("pytest_echo_bench.suites.humaneval:score", False),
    "mmlu_pro": ("pytest_echo_bench.suites.mmlu_pro:score", False),
}
# Checks only text (microseconds): graded on pytest's own thread. mmlu_pro
# reads the item's option count too.
IN_PROCESS = frozenset({*(name for name, (_, text) in BUILTIN.items() if text), "mmlu_pro"})
# A scorer's options checked when the spec is, so a typo fails
# collection with its line, not every row.
OPTION_CHECKS: dict[str, str] = {"mmlu_pro": "pytest_echo_bench.suites.mmlu_pro:check_options"}

_registered: dict[str, Scorer] = {}  # built-ins once imported, and the user's own


def scorer(name: str) -> Callable[[Scorer], Scorer]:
    """Register a custom scorer, e.g. in a conftest.py::

        @pytest_echo_bench.scorer("contains")
        def contains(output: str, example: Example, options: dict) -> Verdict:
            found = example.target.lower() in output.lower()
            return judge(example.target if found else output[-40:], example.target, found)

    and use it as ``scorer: contains`` (options: ``scorer: {name: contains, ...}``).
    """

    def register(fn: Scorer) -> Scorer:
        _registered[name] = fn
        return fn

    return register


def known() -> list[str]:
    return sorted({*BUILTIN, *_registered})


def get_scorer(name: str) -> Scorer | None:
    """A registered or built-in scorer, or ``module:function``; None if there is no such scorer."""
    found = _registered.get(name)
    if found is None and name in BUILTIN:
        ref, text = BUILTIN[name]
        fn = _resolve(ref)
        assert fn is not None, ref  # a built-in that does not import is a bug, not a user error
        found = _registered[name] = on_target(fn) if text else fn
    elif found is None and ":" in name:
        found = _resolve(name)
    return found


def option_check(name: str) -> Callable[[dict[str, Any]], str | None] | None:
    """The built-in scorer's check of its options: the reason they are wrong, or None."""
    return _resolve(OPTION_CHECKS[name]) if name in OPTION_CHECKS else None


def _resolve(ref: str) -> Callable[..., Any] | None:
    module, _, attr = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None
    return found if callable(found) else None


def on_target(fn: TextScorer) -> Scorer:
    """Most scorers compare with the target alone; this lets them stay functions of text."""

    def score(output: str, example: Example, options: dict[str, Any]) -> Verdict:
        return fn(output, example.target, options)

    score.__name__ = fn.__name__
    return score
