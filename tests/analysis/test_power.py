"""Power and sample size (Connor 1987): the formula by hand, a seeded simulation, the CLI."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pytest_echo_bench.analysis.power import mde, n_for_power, power_at
from pytest_echo_bench.analysis.stats import mcnemar_exact
from pytest_echo_bench.cli.main import main

Z_975, Z_80 = 1.959963984540054, 0.8416212335729143


def test_n_for_power_by_hand() -> None:
    # (1.95996 sqrt(0.12) + 0.84162 sqrt(0.12 - 0.0009))^2 / 0.0009 = 1044.02..., rounded up.
    by_hand = (Z_975 * math.sqrt(0.12) + Z_80 * math.sqrt(0.12 - 0.03**2)) ** 2 / 0.03**2
    assert n_for_power(0.03, 0.12) == math.ceil(by_hand) == 1045
    assert n_for_power(-0.03, 0.12) == 1045  # the sign of the difference does not matter
    assert (
        n_for_power(0.0, 0.12) is None
        and n_for_power(0.2, 0.1) is None
        and n_for_power(0.1, 0.0) is None
    )


def test_mde_inverts_n_for_power() -> None:
    assert power_at(1045, 0.03, 0.12) == pytest.approx(0.80, abs=1e-3)
    assert mde(1045, 0.12) == pytest.approx(0.03, abs=2e-4)
    assert mde(10, 0.01) is None  # 10 items, 1% discordant: no difference reaches 80% power
    assert mde(0, 0.12) is None and mde(100, 0.0) is None


def test_simulated_sweeps_at_that_n_reject_about_80_percent() -> None:
    """2,000 seeded sweeps of n items, each item discordant for a with p10 and for b with p01.

    The exact test is a little conservative against Connor's normal approximation (about 0.78 at
    this size); 2,000 sweeps give a standard error of 0.009, so 0.75-0.85 cannot flake, and the
    seed makes it deterministic besides.
    """
    psi, delta = 0.12, 0.03
    n = n_for_power(delta, psi)
    assert n is not None
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    rng = random.Random(20261201)
    rejected = 0
    for _ in range(2000):
        a_only = b_only = 0
        for _ in range(n):
            u = rng.random()
            a_only += u < p10
            b_only += p10 <= u < p10 + p01
        rejected += mcnemar_exact(a_only, b_only) < 0.05
    assert 0.75 <= rejected / 2000 <= 0.85


def test_power_command_from_assumed_shares(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["power", "--diff", "0.03", "--discordant", "0.12"]) == 0
    assert "n = 1045 items" in capsys.readouterr().out
    assert main(["power", "--diff", "0.2", "--discordant", "0.12"]) == 2
    assert "|diff| <= discordant" in capsys.readouterr().err
    assert main(["power", "--diff", "0.03"]) == 2


def pilot(tmp_path: Path, a_only: int, b_only: int, both: int, neither: int) -> Path:
    cells = (
        [(True, False)] * a_only
        + [(False, True)] * b_only
        + [(True, True)] * both
        + [(False, False)] * neither
    )
    rows = [{"task_id": f"t{i}", "arm": arm, "passed": ok, "benchmark": "demo"}
            for i, (a, b) in enumerate(cells) for arm, ok in (("A", a), ("B", b))]
    path = tmp_path / "pilot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_power_command_from_a_pilot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = pilot(tmp_path, 9, 3, 70, 18)  # 100 items: diff 0.06, 12% discordant
    assert main(["power", str(path), "--pair", "A,B"]) == 0
    out = capsys.readouterr().out
    expected = n_for_power(0.06, 0.12)
    assert (
        "A - B = +0.0600 on 100 items, 12.0% discordant" in out and f"n = {expected} items" in out
    )
    assert main(["power", str(path), "--pair", "B,A", "--diff", "0.03"]) == 0
    assert "B - A = -0.0600" in (out := capsys.readouterr().out) and "n = 1045 items" in out
    assert main(["power", str(path), "--pair", "A,Z"]) == 2
    assert main(["power", str(path)]) == 2
