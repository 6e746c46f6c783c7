"""What ``pytest_configure`` registers, ``pytest_unconfigure`` closes and unregisters: a process
that runs several sessions (pytester's in-process runs, an IDE) keeps no plugin, descriptor or
lock of an earlier one."""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import open_descriptors

from conftest import make_spec, sim_spec


@pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="needs /proc to list open descriptors"
)
def test_unconfigure_closes_and_unregisters(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(3))
    out = pytester.path / "r.jsonl"
    seen: dict[str, object] = {}

    class Spy:
        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(self, session: pytest.Session) -> None:
            pm = session.config.pluginmanager
            seen.update(
                controller=pm.get_plugin("echo-bench-controller"),
                worker=pm.get_plugin("echo-bench-worker"),
                config=session.config,
            )

    reprec = pytester.inline_run(
        "--bench-out", str(out), "--bench-concurrency", "4", plugins=[Spy()]
    )
    reprec.assertoutcome(passed=3, failed=3)
    # both were registered for the run
    assert seen["controller"] is not None and seen["worker"] is not None
    pm = seen["config"].pluginmanager  # type: ignore[attr-defined]
    assert (
        pm.get_plugin("echo-bench-controller") is None
        and pm.get_plugin("echo-bench-worker") is None
    )
    assert not pm.is_registered(seen["worker"]) and not pm.is_registered(seen["controller"])
    still_open = {p for p in open_descriptors() if p.startswith(str(pytester.path))}
    assert still_open == set()  # neither the results file nor its lock is held after the run
    assert not Path(f"{out}.lock").exists() and out.exists()


def test_a_plain_suite_registers_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    assert True\n")
    seen: dict[str, object] = {}

    class Spy:
        def pytest_sessionfinish(self, session: pytest.Session) -> None:
            names = [name for name, _ in session.config.pluginmanager.list_name_plugin()]
            seen["ours"] = [n for n in names if n and n.startswith("echo-bench-")]

    pytester.inline_run(plugins=[Spy()]).assertoutcome(passed=1)
    assert seen["ours"] == []
