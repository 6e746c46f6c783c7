"""What a run and ``echo-bench estimate`` say when ``-k``, ``-m`` or a shard selects no item: which
benchmarks and arms there are to select, in one message both print (and both exit 5 with it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.spec.load import Spec

NOTHING_SELECTED = 5  # pytest's "no tests collected": the run's status, and the estimate's


def selection_words(keyword: str | None, markexpr: str | None, shard: str | None) -> str:
    """The options that selected, as typed: ``-k 'x' and --bench-shard 2/4``."""
    parts = [f"-k {keyword!r}" if keyword else "", f"-m {markexpr!r}" if markexpr else "",
             f"--bench-shard {shard}" if shard else ""]
    return " and ".join(p for p in parts if p) or "the selection"


def nothing_selected(what: str, loaded: Sequence[tuple[Spec, int]]) -> str:
    """``what`` (``selection_words``) selected none of the items of ``loaded`` (each spec with its
    item count): the message names every benchmark, its spec file and its arms."""
    total = sum(count for _, count in loaded)
    shown = "; ".join(
        f"{spec.benchmark} ({Path(spec.path).name}): {', '.join(spec.arms)}" for spec, _ in loaded
    )
    return (
        f"echo-bench: {what} selects none of the {total} item(s). Benchmarks and their arms: "
        f"{shown}. "
        "An item is named TASK[ARM]: -k ARM (or -m arm_ARM) selects an arm's items, -k "
        "BENCHMARK a benchmark's"
    )


def estimate_note(
    spec_files: Sequence[Path], keyword: str | None, shard: tuple[int, int] | None
) -> str:
    """``echo-bench estimate``'s message for a ``-k`` or shard that selects no item (the run's)."""
    # as the estimate counts them: one spec once
    unique = {path.resolve(): path for path in spec_files}
    loaded = [load_benchmark(path) for path in unique.values()]
    counts = [(spec, len(examples) * len(spec.arms) * spec.epochs) for spec, examples in loaded]
    return nothing_selected(
        selection_words(keyword, None, f"{shard[0]}/{shard[1]}" if shard else None), counts
    )
