"""``echo-bench report --format html``: one self-contained, escaped
page, checked in a real browser."""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_echo_bench.cli.main import main
from pytest_echo_bench.report.colors import BASE_COLORS, palette
from pytest_echo_bench.report.figures import build_report, load_results
from pytest_echo_bench.report.formats.html import render_html

CHROMIUM = Path("/usr/bin/chromium")
ATTACK = (
    '<script>document.title=\'pwned\'</script>"><img id="pwned-img" src=x '
    "onerror=\"document.title='pwned'\">"
    '<b id="pwned-b">bold</b>'
)
ARMS = {
    "strong": (0.85, 0.02),
    "judge": (0.83, 0.004),
    "cheap": (0.70, 0.001),
    ATTACK: (0.55, 0.01),
}


def sweep(
    path: Path, arms: dict[str, tuple[float, float]], items: int = 240, seed: int = 3
) -> Path:
    """A sweep over four subtasks (one named like markup), priced, with answers that are markup."""
    rng = random.Random(seed)
    subtasks = ["navigate", "snarks", "<i>dates</i>", "=cmd"]
    rows: list[dict[str, Any]] = [
        {"_meta": True, "benchmark": "demo", "arms": {"demo": list(arms)}}
    ]
    for i in range(items):
        hard = rng.random()
        for arm, (rate, cost) in arms.items():
            ok = rng.random() < rate * (0.7 + 0.6 * hard)
            rows.append(
                {
                    "task_id": f"t{i:04d}",
                    "arm": arm,
                    "passed": ok,
                    "benchmark": "demo",
                    "subtask": subtasks[i % 4],
                    "status": "correct" if ok else "wrong",
                    "answer": ATTACK if arm == "cheap" else f"answer {i}",
                    "cost_usd": cost,
                    "wall_seconds": 1.0,
                    "sub_calls": 1,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def page(tmp_path: Path, arms: dict[str, tuple[float, float]] = ARMS, items: int = 240) -> str:
    return render_html(build_report(load_results([sweep(tmp_path / "run.jsonl", arms, items)])))


def test_page_is_self_contained_and_escaped(tmp_path: Path) -> None:
    text = page(tmp_path)
    assert "<script" not in text and "<img" not in text and '<b id="pwned-b"' not in text
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in text
    assert "&lt;i&gt;dates&lt;/i&gt;" in text
    assert not re.search(r'(?:src|href)="', text)  # nothing is loaded, not even an image
    assert "http://" not in text and "https://" not in text
    assert "default-src 'none'" in text


def test_page_has_every_section(tmp_path: Path) -> None:
    text = page(tmp_path)
    assert text.count('class="rate-bar"') == 4 and text.count('class="ci"') >= 4
    assert 'class="heatmap"' in text and text.count('class="heat"') == 16
    # 4 x 4, the diagonal included
    assert 'class="pair-matrix"' in text and text.count('class="pair ') == 16
    assert "sig-pos" in text and "sig-neg" in text  # strong and judge beat the attack-named arm
    assert 'class="frontier"' in text and text.count('class="cost-point"') == 4
    assert 'class="disagreements"' in text


def test_page_without_costs_or_subtasks(tmp_path: Path) -> None:
    rows = [
        {"task_id": f"t{i}", "arm": arm, "passed": (i + k) % 3 > 0}
        for i in range(30)
        for k, arm in enumerate("AB")
    ]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = render_html(build_report(load_results([path])))
    assert (
        'id="no-cost"' in text
        and 'class="heatmap"' not in text
        and text.count('class="rate-bar"') == 2
    )


def test_palette_stays_distinct_beyond_ten_arms() -> None:
    colors = palette(40)
    assert colors[:10] == list(BASE_COLORS) and len(set(colors)) == 40
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors)


def test_html_from_the_command_on_a_large_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep(
        tmp_path / "large.jsonl",
        {f"arm{i}": (0.5 + i * 0.02, 0.001 * (i + 1)) for i in range(12)},
        items=3000,
    )
    assert main(["report", str(path), "--format", "html"]) == 0
    text = capsys.readouterr().out
    assert text.count('class="rate-bar"') == 12 and text.count('class="pair ') == 144
    assert text.count("<tr><td class=\"text\">t") == 100  # the first 100 disagreements of the many


# ---------------------------------------------------------------- a real browser


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def test_report_page_in_a_real_browser(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium package: apt-get install chromium")
    # 13 arms
    arms = {**ARMS, **{f"extra-{i}": (0.4 + 0.03 * i, 0.002 * i + 0.001) for i in range(9)}}
    out = tmp_path / "report.html"
    out.write_text(page(tmp_path, arms))

    dumped = chromium(tmp_path / "profile-dom", "--dump-dom", out.as_uri())
    dom = dumped.stdout
    assert dumped.returncode == 0 and "</html>" in dom, dumped.stderr[-2000:]
    assert dom.count('class="rate-bar"') == 13 and dom.count('class="cost-point"') == 13
    assert (
        'class="pair-matrix"' in dom and 'class="heatmap"' in dom and 'class="disagreements"' in dom
    )
    assert dom.count("<polyline") == 1 and dom.count("<svg") == 2
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and "pwned" not in title.group(1)
    # text, never elements
    assert "<script" not in dom and "<img" not in dom and '<b id="pwned-b"' not in dom

    shot = tmp_path / "shot.png"
    taken = chromium(
        tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1300,2200", out.as_uri()
    )
    assert shot.exists(), taken.stderr[-2000:]
    data = shot.read_bytes()
    # A blank page compresses to a few kilobytes; this one has bars, a
    # heat map, a matrix and a plot.
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 60_000
