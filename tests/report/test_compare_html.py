"""``echo-bench compare --format html`` in a real browser: one plot per arm, nothing executed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from results_files import meta, row, write

from pytest_echo_bench.cli.main import main

CHROMIUM = Path("/usr/bin/chromium")
ATTACK = "<script>document.title='pwned'</script><img id=\"pwned-img\" src=x>"


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium with a profile of its own, as the report's page test runs it."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def test_compare_page_in_a_real_browser(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium package: apt-get install chromium")
    arms = ("strong", "cheap", ATTACK)
    base = [row(f"t{i}", arm, i % 3 != 0, answer=ATTACK, served_model="m1") for i in range(60)
            for arm in arms]
    cand = [row(f"t{i}", arm, i % 4 != 0, answer="b", served_model="m2") for i in range(60)
            for arm in arms]
    a = write(tmp_path / "a.jsonl", base, meta=meta(arms=arms))
    b = write(tmp_path / "b.jsonl", cand, meta=meta(arms=arms))
    out = tmp_path / "compare.html"
    assert main(["compare", str(a), str(b), "--format", "html", "-o", str(out)]) == 0

    dumped = chromium(tmp_path / "profile-dom", "--dump-dom", out.as_uri())
    dom = dumped.stdout
    assert dumped.returncode == 0 and "</html>" in dom, dumped.stderr[-2000:]
    assert dom.count('class="compare-plot"') == 3 and dom.count('class="rate-bar"') == 6
    assert dom.count('class="diff"') == 3
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and "pwned" not in title.group(1)
    assert "<script" not in dom and "<img" not in dom

    shot = tmp_path / "shot.png"
    taken = chromium(tmp_path / "profile-shot", f"--screenshot={shot}",
                     "--window-size=1000,1600", out.as_uri())
    assert shot.exists(), taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
