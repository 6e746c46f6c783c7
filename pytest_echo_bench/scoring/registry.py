"""The scorer registry: ``scorer:`` names in a spec, resolved to functions.

Built-in scorers are named here as ``module:function`` strings and imported on first use, so
the registry depends on no implementation (the BBH scorer and the HumanEval sandbox load only
when a spec uses them). A user's scorer registers itself with ``@pytest_echo_bench.scorer``,
or is named directly as ``module:function``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.registry import Registry, resolve
from pytest_echo_bench.scoring.verdict import Scorer, TextScorer, Verdict

_BUILTIN = {
    "exact": "pytest_echo_bench.scoring.text:exact",
    "numeric": "pytest_echo_bench.scoring.text:numeric",
    "regex": "pytest_echo_bench.scoring.text:regex",
    "choice": "pytest_echo_bench.scoring.text:choice",
    "bbh": "pytest_echo_bench.suites.bbh:score",
    "humaneval": "pytest_echo_bench.suites.humaneval:score",
    "mmlu_pro": "pytest_echo_bench.suites.mmlu_pro:score",
    "model_graded": "pytest_echo_bench.scoring.model_graded:model_graded",
    "mt_bench": "pytest_echo_bench.suites.mt_bench:score",
    "pairwise": "pytest_echo_bench.scoring.pairwise:pairwise",
}
# The built-ins that compare with the target alone (TextScorers): made scorers of an item on import.
_ON_TARGET = frozenset({"exact", "numeric", "regex", "choice", "bbh"})
# Checks only text (microseconds): graded on pytest's own thread. mmlu_pro
# reads the item's option count too.
IN_PROCESS = frozenset({*_ON_TARGET, "mmlu_pro"})
# A scorer's options checked when the spec is, so a typo fails
# collection with its line, not every row.
OPTION_CHECKS: dict[str, str] = {
    "mmlu_pro": "pytest_echo_bench.suites.mmlu_pro:check_options",
    "model_graded": "pytest_echo_bench.scoring.model_graded:check_options",
    "mt_bench": "pytest_echo_bench.suites.mt_bench:check_options",
    "pairwise": "pytest_echo_bench.scoring.pairwise:check_options",
}


def _adapt(name: str, fn: Any) -> Scorer:
    return on_target(fn) if name in _ON_TARGET else fn  # type: ignore[no-any-return]


SCORERS: Registry[Scorer] = Registry("scorer", _BUILTIN, _adapt)  # built-ins, and the user's own
# The names of scorers called with ``judges=`` (scoring.judging): the built-in ones, and the user's.
_judged: set[str] = {"model_graded", "mt_bench", "pairwise"}


def scorer(name: str, judges: bool = False) -> Callable[[Scorer], Scorer]:
    """Register a custom scorer, e.g. in a conftest.py::

        @pytest_echo_bench.scorer("contains")
        def contains(output: str, example: Example, options: dict) -> Verdict:
            found = example.target.lower() in output.lower()
            return judge(example.target if found else output[-40:], example.target, found)

    and use it as ``scorer: contains`` (options: ``scorer: {name: contains, ...}``). With
    ``judges=True`` it is called with ``judges=`` too, to ask a model (``scoring.judging``).
    """

    def register(fn: Scorer) -> Scorer:
        SCORERS.register(name, fn)
        (_judged.add if judges else _judged.discard)(name)
        return fn

    return register


def takes_judges(name: str) -> bool:
    """Whether the scorer ``name`` grades with judges (registered with ``judges=True``)."""
    return name in _judged


def known() -> list[str]:
    return SCORERS.names()


def get_scorer(name: str) -> Scorer | None:
    """A registered or built-in scorer, or ``module:function``; None if there is no such scorer."""
    found = SCORERS.get(name)
    if found is None and ":" in name:
        found = _resolve(name)
    return found


def option_check(name: str) -> Callable[[dict[str, Any]], str | None] | None:
    """The built-in scorer's check of its options: the reason they are wrong, or None."""
    return _resolve(OPTION_CHECKS[name]) if name in OPTION_CHECKS else None


def _resolve(ref: str) -> Callable[..., Any] | None:
    try:
        found = resolve(ref)
    except (ImportError, AttributeError):
        return None
    return found if callable(found) else None


def on_target(fn: TextScorer) -> Scorer:
    """Most scorers compare with the target alone; this lets them stay functions of text."""

    def score(output: str, example: Example, options: dict[str, Any]) -> Verdict:
        return fn(output, example.target, options)

    score.__name__ = fn.__name__
    return score
