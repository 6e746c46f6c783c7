"""Money as every output shows it: one fixed-point text (``budget.money.usd``) in the tables,
figures without float noise in JSON and CSV, each call's spend counted once across a run and its
regrade, and CSV lines that all end in CRLF."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.budget.money import figure, usd
from pytest_echo_bench.cli.main import main

COST = 0.00055  # three of them sum to 0.0016500000000000002 in floats
ARMS = ("  right: {provider: sim, accuracy: 1.0, template: 'So the answer is {answer}.'}\n"
        "  wrong: {provider: sim, accuracy: 0.0, template: 'So the answer is {answer}.'}")


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0.0000990, "0.000099"),
        (0.000055, "0.000055"),
        (0.0016500000000000009, "0.0017"),
        (0.0, "0.0000"),
        (12.5, "12.5000"),
        (0.00099, "0.00099"),
    ],
)
def test_an_amount_shows_its_first_two_digits_and_no_more(amount: float, shown: str) -> None:
    assert usd(amount) == shown


def test_a_figure_drops_the_float_sums_noise() -> None:
    assert (
        figure(COST + COST + COST) == 0.00165
        and figure(None) is None
        and figure(4.95e-06) == 4.95e-06
    )


def costed(results: Path) -> None:
    """Give every row of ``results`` a cost, as a priced provider's rows have."""
    lines = results.read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    results.write_text(
        "".join(json.dumps(r if r.get("_meta") else {**r, "cost_usd": COST}) + "\n" for r in rows)
    )


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


def test_a_run_and_its_regrade_count_each_calls_spend_once_in_every_format(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    spec = make_spec(pytester, sim_spec(3, arms=ARMS))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 6
    costed(sweep.out)
    spec.write_text(spec.read_text().replace("scorer: exact", "scorer: numeric"))
    regraded = pytester.path / "regraded.jsonl"
    capsys.readouterr()
    assert main(["regrade", str(sweep.out), "-o", str(regraded)]) == 0
    files = (str(sweep.out), str(regraded))
    data = json.loads(report(capsys, *files, "--format", "json"))
    # The regrade sent nothing: its rows are the run's calls, counted
    # once (0.0033 counted them twice).
    assert [data["arms"][a]["spend_usd"] for a in ("right", "wrong")] == [0.00165, 0.00165]
    assert data["arms"]["right"]["cost_usd"] == 0.00165  # no float noise in the figures
    text = report(capsys, *files, "--format", "csv")
    lines = {r["arm"]: r for r in csv.DictReader(io.StringIO(text, newline=""))}
    assert lines["right"]["spend_usd"] == "0.00165" and lines["right"]["cost_usd"] == "0.00165"
    # RFC 4180, the last line too
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", "")
    table = report(capsys, *files)
    # the table: the same text as the run's end table
    assert f"{usd(0.00165)}          0.00055     {usd(0.00165)}" in table, table


def test_a_retried_errors_call_still_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = {"_meta": True, "benchmark": "demo", "arms": {"demo": ["A"]}}
    base = {
        "benchmark": "demo",
        "task_id": "t0",
        "arm": "A",
        "run_id": "r1",
        "finished_at": "2024-01-01T00:00:09Z",
        "cost_usd": COST,
        "detail": "",
        "output": "",
        "target": "B",
    }
    rows = [{**base, "passed": False, "status": "error", "started_at": "2024-01-01T00:00:00Z"},
            {**base, "passed": True, "status": "correct", "started_at": "2024-01-01T00:00:05Z"}]
    results = tmp_path / "run.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in [meta, *rows]))
    copy = tmp_path / "copy.jsonl"
    copy.write_text(results.read_text())
    data = json.loads(report(capsys, str(results), str(copy), "--format", "json"))
    assert data["arms"]["A"]["spend_usd"] == 0.0011  # two calls, each once: the copy adds nothing
