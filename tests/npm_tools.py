"""The node tools the tests run (pinned in package-lock.json), installed
by ``npm ci`` the way CI does.

A fresh clone has no node_modules: the first test that needs a tool runs ``npm ci`` once, so the
README's test command tests everything on a machine with node and npm.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from filelock import FileLock
from first_time import building

ROOT = Path(__file__).resolve().parents[1]
NPM_TIMEOUT_S = 300.0  # the pinned packages from the registry: about 15 s here


def npm_ci(wanted: Path) -> None:
    """Run ``npm ci`` in the project unless ``wanted`` (a path under
    node_modules) is there already."""
    npm = shutil.which("npm")
    if npm is None or wanted.exists():
        return
    # xdist workers may get here together: one installs, the others wait and find it installed.
    with FileLock(str(ROOT / ".npm-ci.lock")):
        if not wanted.exists():
            with building("node_modules"):
                subprocess.run(
                    [npm, "ci", "--no-audit", "--no-fund"],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=NPM_TIMEOUT_S,
                    check=False,
                )
