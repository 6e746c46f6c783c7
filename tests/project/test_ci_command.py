"""CI runs the README's test command: ``.ci/run`` reads it from the
README, so the two cannot drift."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^Run the test suite:\n\n```\n(.*?)\n```", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "README.md: no code block after 'Run the test suite:'"
    return block.group(1)


def test_ci_runs_the_command_the_readme_gives() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    line = next(line for line in script.splitlines() if line.startswith("command="))
    done = subprocess.run(
        ["bash", "-c", f'{line}\nprintf "%s" "$command"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == readme_command()
    assert re.fullmatch(r"pip install -e '\.\[test\]' && pytest( .*)?", done.stdout), done.stdout
    assert 'eval "${command/pip install/pip install -q}"' in script  # and runs it
