"""The HTML report's header and cost plot: what the page is of, marked axes, amounts in fixed point,
labels that do not cover each other, and no "-0.000" in the pair matrix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.formats.svg import label_box

META = {
    "_meta": True,
    "benchmark": "demo",
    "run_id": "4430a3cec55e",
    "created_at": "2026-12-05T15:14:01Z",
}


def results(path: Path, arms: dict[str, tuple[float, float]], items: int = 40) -> Path:
    """``arms``: name -> (pass rate, cost per item); the first ``rate * items`` items pass."""
    rows: list[dict[str, Any]] = [{**META, "arms": {"demo": list(arms)}}]
    for i in range(items):
        for arm, (rate, cost) in arms.items():
            ok = i < rate * items
            rows.append(
                {
                    "task_id": f"t{i:03d}",
                    "arm": arm,
                    "passed": ok,
                    "benchmark": "demo",
                    "answer": "x",
                    "status": "correct" if ok else "wrong",
                    "cost_usd": cost,
                    "wall_seconds": 1.0,
                    "sub_calls": 1,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arms: dict[str, tuple[float, float]]
) -> str:
    path = results(tmp_path / "run.jsonl", arms)
    capsys.readouterr()
    assert main(["report", str(path), "--format", "html"]) == 0
    return capsys.readouterr().out


def chart(html: str) -> str:
    found = re.search(r'<svg class="cost-chart".*?</svg>', html, re.S)
    assert found is not None
    return found.group(0)


def test_the_header_names_the_file_its_run_and_when_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = page(tmp_path, capsys, {"a": (0.5, 0.001), "b": (0.6, 0.002)})
    header = html[html.index("<h1>"):html.index('id="summary"')]
    assert (
        str(tmp_path / "run.jsonl") in header
        and "run 4430a3cec55e" in header
        and "2026-12-05T15:14:01Z" in header
    )


def test_labels_of_arms_of_near_cost_and_rate_do_not_cover_each_other(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arms = {
        "alpha": (0.8, 0.00100),
        "bravo": (0.8, 0.00101),
        "charlie": (0.825, 0.00102),
        "delta": (0.5, 0.004),
    }
    svg = chart(page(tmp_path, capsys, arms))
    texts = re.findall(
        r'<g class="cost-point".*?<text x="([\d.]+)" '
        r'y="([\d.]+)"><title>[^<]*</title>([^<]*)</text>',
        svg,
    )
    assert len(texts) == 4
    boxes = [label_box(float(x) - 9, float(y), text) for x, y, text in texts]
    overlapping = [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[:i])
                   if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]]
    assert overlapping == []  # the first three were drawn on one spot
    width = float(re.search(r'width="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert all(box[1] <= width for box in boxes)  # and none runs off the chart


def test_both_axes_are_marked_and_no_amount_is_in_exponent_form(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = page(tmp_path, capsys, {"a": (0.5, 4.95e-06), "b": (0.7, 0.0004), "c": (0.9, 0.002)})
    svg = chart(html)
    assert svg.count('class="tick x"') >= 2 and svg.count('class="tick y"') == 5
    # p-values keep their exponents: no amount does
    amounts = re.sub(r"p(<sub>holm</sub>)?=[^<\"]*", "", html)
    # 4.95e-06 was shown so
    assert re.search(r"\de-\d", amounts) is None, re.findall(r".{20}\de-\d.{5}", amounts)
    assert "0.0000050" in svg or "0.0000049" in svg


def test_a_pair_with_no_difference_shows_zero_without_a_sign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = page(tmp_path, capsys, {"a": (0.5, 0.001), "b": (0.5, 0.002)})
    assert "-0.000" not in html and "0.000<br>" in html
