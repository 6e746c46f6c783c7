"""Power from a pilot with clusters and repeats (Miller 2024): the estimators against a model whose
truth is known, the sample sizes against simulated sweeps tested with cluster-robust errors, the
ANOVA against the same sums written another way, and the command's
figures against a formula here."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.analysis.design import (
    PairedItem,
    estimate_design,
    items_clustered,
    items_needed,
    paired_items,
)
from pytest_echo_bench.cli.main import main

Z_975, Z_80 = 1.959963984540054, 0.8416212335729143


def model_pilot(
    rng: random.Random,
    clusters: int,
    per: int,
    k: int,
    delta: float,
    sc2: float,
    sv2: float,
    sa2: float,
    sb2: float,
) -> list[PairedItem]:
    """x_A - x_B = delta + w_g + v_i; each sample adds noise of variance sa2 (A) or sb2 (B)."""
    items = []
    for g in range(clusters):
        w = rng.gauss(0, math.sqrt(sc2))
        for _ in range(per):
            xa = rng.gauss(0.5, 0.1)
            xb = xa - delta - w - rng.gauss(0, math.sqrt(sv2))
            items.append(PairedItem(f"s{g}", tuple(rng.gauss(xa, math.sqrt(sa2)) for _ in range(k)),
                                    tuple(rng.gauss(xb, math.sqrt(sb2)) for _ in range(k))))
    return items


def test_the_estimators_find_the_model_s_components() -> None:
    truth = {"sc2": 0.02, "sv2": 0.03, "sa2": 0.1, "sb2": 0.15}
    design = estimate_design(model_pilot(random.Random(7), 150, 20, 3, 0.05, **truth))
    assert design is not None and design.n == 3000 and design.clusters == 150
    assert design.mean_diff == pytest.approx(0.05, abs=0.02)
    assert design.between_cluster == pytest.approx(truth["sc2"], rel=0.2)
    assert design.within_a == pytest.approx(truth["sa2"], rel=0.05)
    assert design.within_b == pytest.approx(truth["sb2"], rel=0.05)
    signal = truth["sc2"] + truth["sv2"]
    assert design.variance(3) == pytest.approx(signal + 0.25 / 3, rel=0.08)  # the pilot's own k
    assert design.variance(10) == pytest.approx(signal + 0.25 / 10, rel=0.12)
    assert design.icc_at(10) == pytest.approx(truth["sc2"] / (signal + 0.025), rel=0.25)


def simulated_power(
    rng: random.Random,
    n: int,
    clusters: int,
    k: int,
    delta: float,
    sc2: float,
    sv2: float,
    noise2: float,
    sweeps: int,
) -> float:
    """Share of sweeps of n items (spread over the clusters) whose
    cluster-robust z-test rejects at 0.05."""
    rejected = 0
    # one cluster: every item its own (the plain standard error)
    groups = clusters if clusters > 1 else n
    for _ in range(sweeps):
        shifts = [rng.gauss(0, math.sqrt(sc2)) for _ in range(clusters)]
        d = [
            (i % groups, delta + shifts[i % clusters] + rng.gauss(0, math.sqrt(sv2 + noise2 / k)))
            for i in range(n)
        ]
        mean = sum(x for _, x in d) / n
        sums = [0.0] * groups
        for g, x in d:
            sums[g] += x - mean
        se = math.sqrt(groups / (groups - 1) * sum(s * s for s in sums)) / n
        rejected += abs(mean / se) > Z_975
    return rejected / sweeps


def test_clustered_n_has_the_power_asked_and_the_plain_n_does_not() -> None:
    sc2, sv2, noise2, k, delta, clusters = 0.04, 0.01, 0.2, 2, 0.1, 40
    variance = sc2 + sv2 + noise2 / k
    icc = sc2 / variance
    plain = items_needed(variance, delta, 0.05, 0.8)
    clustered = items_clustered(variance, icc, clusters, delta, 0.05, 0.8)
    assert plain == math.ceil((Z_975 + Z_80) ** 2 * variance / delta ** 2)
    assert clustered is not None and plain is not None and clustered > 3 * plain
    rng = random.Random(11)
    assert simulated_power(
        rng, clustered, clusters, k, delta, sc2, sv2, noise2, 600
    ) == pytest.approx(0.8, abs=0.05)
    # clusters ignored: short of 0.8
    assert simulated_power(rng, plain, clusters, k, delta, sc2, sv2, noise2, 600) < 0.7


def test_repeats_buy_what_the_formula_says() -> None:
    """Four repeats on a noisy pilot: the n planned for K = 4 has its power
    when sweeps average four samples."""
    design = estimate_design(model_pilot(random.Random(3), 1, 2000, 2, 0.0, 0.0, 0.02, 0.2, 0.2))
    assert design is not None and design.clusters == 1
    n4 = items_needed(design.variance(4), 0.08, 0.05, 0.8)
    n1 = items_needed(design.variance(1), 0.08, 0.05, 0.8)
    assert n4 is not None and n1 is not None and n4 < n1 / 2
    power = simulated_power(random.Random(5), n4, 1, 4, 0.08, 0.0, 0.02, 0.4, 800)
    assert power == pytest.approx(0.8, abs=0.05)


def anova_by_totals(groups: list[list[float]]) -> float:
    """sigma2_c by the textbook's computing formulas: SSB = sum T_g^2 / m_g - T^2 / n,
    SSW = sum x^2 - sum T_g^2 / m_g."""
    n, g = sum(map(len, groups)), len(groups)
    total = sum(map(sum, groups))
    between_ss = sum(sum(v) ** 2 / len(v) for v in groups) - total ** 2 / n
    within_ss = sum(x * x for v in groups for x in v) - sum(sum(v) ** 2 / len(v) for v in groups)
    m0 = (n - sum(len(v) ** 2 for v in groups) / n) / (g - 1)
    return max((between_ss / (g - 1) - within_ss / (n - g)) / m0, 0.0)


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]), min_size=1, max_size=6),
        min_size=2,
        max_size=6,
    )
)
def test_between_cluster_variance_agrees_with_the_computing_formulas(
    groups: list[list[float]],
) -> None:
    items = [PairedItem(f"s{g}", (x,), (0.0,)) for g, v in enumerate(groups) for x in v]
    design = estimate_design(items)
    assert design is not None
    if len(items) > len(groups):
        assert design.between_cluster == pytest.approx(anova_by_totals(groups), abs=1e-9)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(0.0, 0.9), st.integers(2, 200), st.floats(0.02, 0.5))
def test_clustered_n_is_the_least_n_with_that_design_effect(
    variance: float, icc: float, clusters: int, delta: float
) -> None:
    n = items_clustered(variance, icc, clusters, delta, 0.05, 0.8)
    n0 = (Z_975 + Z_80) ** 2 * variance / delta ** 2
    if n is None:
        # even infinitely many items per subtask fall short
        assert n0 * icc >= clusters * (1 - 1e-9)
        return
    assert n >= n0 * (1 + (n / clusters - 1) * icc) * (1 - 1e-9)
    assert n == 1 or n - 1 < n0 * (1 + ((n - 1) / clusters - 1) * icc)


def pilot_file(tmp_path: Path, epochs: int) -> tuple[Path, list[PairedItem]]:
    rng = random.Random(2)
    rows, items = [], []
    for i in range(120):
        pa, sub = rng.choice([0.3, 0.6, 0.9]), f"s{i % 4}"
        pb = max(pa - 0.1 * (i % 4), 0.0)
        a = tuple(float(rng.random() < pa) for _ in range(epochs))
        b = tuple(float(rng.random() < pb) for _ in range(epochs))
        items.append(PairedItem(sub, a, b))
        for e in range(epochs):
            for arm, v in (("A", a[e]), ("B", b[e])):
                row = {
                    "task_id": f"t{i}",
                    "arm": arm,
                    "passed": bool(v),
                    "status": "correct" if v else "wrong",
                    "benchmark": "demo",
                    "subtask": sub,
                }
                rows.append({**row, "epoch": e + 1} if epochs > 1 else row)
    path = tmp_path / "pilot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, items


def test_the_command_prints_the_formula_s_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, items = pilot_file(tmp_path, 3)
    assert main(["power", str(path), "--pair", "A,B", "--diff", "0.05", "--repeats", "6"]) == 0
    out = capsys.readouterr().out
    diffs = [sum(it.a) / 3 - sum(it.b) / 3 for it in items]
    var = statistics.variance(diffs)
    assert f"paired variance per item {var:.4f}" in out
    assert f"without clustering: n = {math.ceil((Z_975 + Z_80) ** 2 * var / 0.05**2)} items" in out
    assert "with 4 subtasks as clusters: ICC" in out and "with 6 repeats per item" in out
    within = (
        [statistics.variance(it.a) for it in items],
        [statistics.variance(it.b) for it in items],
    )
    noise = statistics.fmean(
        statistics.variance(it.a) / 3 + statistics.variance(it.b) / 3 for it in items
    )
    k6 = max(var - noise, 0.0) + (statistics.fmean(within[0]) + statistics.fmean(within[1])) / 6
    assert (
        f"paired variance {k6:.4f}: n = {math.ceil((Z_975 + Z_80) ** 2 * k6 / 0.05**2)} items"
        in out
    )


def test_a_pilot_without_epochs_says_repeats_need_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = pilot_file(tmp_path, 1)
    assert main(["power", str(path), "--pair", "A,B", "--diff", "0.05", "--repeats", "4"]) == 0
    out = capsys.readouterr().out
    assert "1 sample per item and arm" in out and "needs a pilot with epochs: 2 or more" in out
    assert "n = 1045 items" not in out


def test_repeats_without_a_pilot_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["power", "--diff", "0.03", "--discordant", "0.12", "--repeats", "3"]) == 2
    assert "--repeats K plans from a pilot file" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "1001", "x", "2.5"])
def test_bad_repeats_are_refused(tmp_path: Path, value: str) -> None:
    path, _ = pilot_file(tmp_path, 1)
    assert main(["power", str(path), "--pair", "A,B", "--repeats", value]) == 2


def test_items_pair_by_task_and_keep_epochs_apart() -> None:
    rows = [
        ("t1", "A", "s", 1, 1.0),
        ("t1", "A", "s", 2, 0.0),
        ("t1", "B", "s", 1, 1.0),
        ("t2", "A", None, 1, 1.0),
        ("t1", "C", "s", 1, 0.0),
    ]
    # t2 has no B: not a pair
    assert paired_items(rows, "A", "B") == [PairedItem("s", (1.0, 0.0), (1.0,))]
    assert estimate_design(paired_items(rows, "A", "B")) is None  # one item: no variance


def test_a_vanishing_difference_needs_no_finite_n(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the generated-argument test: --diff 1e-300 overflowed a float power (status 3)."""
    assert items_needed(0.2, 1e-300, 0.05, 0.8) is None
    assert items_clustered(0.2, 0.1, 10, 1e-300, 0.05, 0.8) is None
    path, _ = pilot_file(tmp_path, 2)
    status = main(["power", str(path), "--pair", "A,B", "--diff", "1e-300", "--repeats", "2"])
    assert status == 2 and "--diff 1e-300 is below 0.0001" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--diff", "1e-9", "--discordant", "0.1"], "--diff 1e-09 is below 0.0001"),
    (["PILOT", "--pair", "A,A"], "an arm cannot be compared with itself"),
    (["PILOT", "--pair", "A,B", "--discordant", "0.3"], "--discordant plans without a pilot"),
])
def test_questions_without_an_answer_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 argv: list[str], message: str) -> None:
    path, _ = pilot_file(tmp_path, 2)
    assert main(["power", *[str(path) if a == "PILOT" else a for a in argv]]) == 2
    assert message in capsys.readouterr().err


def test_an_epochs_pilot_names_both_plans_and_repeats_read_in_the_singular(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = pilot_file(tmp_path, 3)
    assert main(["power", str(path), "--pair", "A,B", "--diff", "0.05", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "two plans: McNemar's n above counts each item as one right/wrong pair" in out
    assert "with 1 repeat per item" in out and "1 repeats" not in out
