"""What the report checks its judges against: people's labels (``--labels``: each judge's
agreement, confusion matrix and mean bias) and the arms themselves (a judge of an arm's own model
family is named in a warning, ``engine.families``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pytest_echo_bench.analysis.agreement import is_number
from pytest_echo_bench.analysis.judges import agree_with_humans
from pytest_echo_bench.engine.families import Model, self_preference
from pytest_echo_bench.errors import EchoBenchError
from pytest_echo_bench.report.judged import HumanFigures, Judging, LabelsRead
from pytest_echo_bench.report.labels import HumanLabel, Label
from pytest_echo_bench.results.read import Item, Results
from pytest_echo_bench.results.specs import recorded_specs

NAMED = 5  # unmatched labels named (the rest counted)
Key = tuple[str | None, str, str, int]


def add_humans(found: Judging, results: Results, labels: Sequence[HumanLabel], path: str) -> None:
    """Each judge of each benchmark against ``labels``: on the items both labelled and graded."""
    index: dict[Key, list[Item]] = defaultdict(list)
    wanted = {(lab.benchmark, lab.task_id, lab.arm, lab.epoch) for lab in labels}
    for item in results.rows:
        for bench in (item.benchmark, None):
            key = (bench, item.task_id, item.arm, item.epoch)
            if key in wanted:
                index[key].append(item)
    pairs: dict[tuple[str, str], list[tuple[Label, Label | None]]] = defaultdict(list)
    unmatched: list[HumanLabel] = []
    for lab in labels:
        items = index.get((lab.benchmark, lab.task_id, lab.arm, lab.epoch))
        if not items:
            unmatched.append(lab)
        for item in items or ():
            for judge, rating in _ratings(item, isinstance(lab.label, str)).items():
                pairs[(item.benchmark, judge)].append((lab.label, rating))
    found.labels = LabelsRead(path, len(labels) - len(unmatched), len(unmatched),
                              tuple(_name(lab) for lab in unmatched[:NAMED]))
    for (bench, judge), rated in pairs.items():
        ordinal = all(is_number(h) and is_number(j) for h, j in rated if j is not None)
        found.humans.append(HumanFigures(bench, judge, agree_with_humans(rated, ordinal)))


def _ratings(item: Item, words: bool) -> dict[str, Label | None]:
    """Each judge's rating of a labelled item: its word against a word, else its grade."""
    found: dict[str, Label | None] = {}
    for judge, _, grade, label, order in item.judged:
        if order is None:
            found.setdefault(judge, label if words and label is not None else grade)
    return found


def _name(lab: HumanLabel) -> str:
    where = f"{lab.benchmark}/" if lab.benchmark else ""
    return f"{where}{lab.task_id} {lab.arm}" + (f" epoch {lab.epoch}" if lab.epoch > 1 else "")


NOT_RECORDED = ("; the file records no arm's model and its spec was not found under the current "
                "directory, so the judge's model was compared with the arms' names")


def add_warnings(found: Judging, results: Results) -> None:
    """Self-preference: each judge (by the model its replies name) against the arms (by the
    models their spec declares, else their names)."""
    for bench in dict.fromkeys(i.benchmark for i in results.rows if i.judged):
        declared = _declared(results, bench)
        if declared is None:
            names = [a for m in results.metas for a in m.arms.get(bench, [])]
            arms, providers = [Model(a, None, a) for a in dict.fromkeys(names)], {}
        else:
            arms, providers = declared
        served = {(j[0], j[1]) for i in results.rows if i.benchmark == bench for j in i.judged
                  if j[1]}
        judges = [Model(name, providers.get(name), model) for name, model in sorted(served)]
        suffix = "" if declared else NOT_RECORDED
        found.warnings += [w + suffix for w in self_preference(arms, judges)]


def _declared(results: Results, bench: str) -> tuple[list[Model], dict[str, str]] | None:
    """The arms' declared models and the judges' providers, from the benchmark's spec as the meta
    line names it, under the current directory (None: not found, or not loadable)."""
    from pytest_echo_bench.engine.declared import declared
    from pytest_echo_bench.engine.families import declared_model

    for spec in recorded_specs(results, bench):
        try:
            judges = declared(spec)
        except (EchoBenchError, OSError, ValueError):
            continue
        arms = [m for a in spec.arms.values() if (m := declared_model(a)) is not None]
        return arms, {n: j.provider for n, j in judges.items()}
    return None
