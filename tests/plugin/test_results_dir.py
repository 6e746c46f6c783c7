"""The default results directory: named once (``store.files.RESULTS_DIR``), and made as pytest
makes its cache directory, with a ``.gitignore`` of ``*``; the ``CACHEDIR.TAG`` marks only its
``cache/`` (the response cache), since backup tools skip a tagged
directory and results must be kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import make_spec, sim_spec
from pytest_echo_bench.plugin import _ALWAYS_SKIP
from pytest_echo_bench.store.files import CACHE_DIR, CACHE_FILE, RESULTS_DIR, default_cache

ARGS = ("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")


def test_a_sweep_makes_the_directory_ignored_and_only_its_cache_tagged(
    pytester: pytest.Pytester,
) -> None:
    make_spec(pytester, sim_spec(2))
    result = pytester.runpytest(*ARGS)
    assert result.ret == 0
    made = pytester.path / RESULTS_DIR
    assert (made / ".gitignore").read_text().splitlines()[-1] == "*"
    # `tar --exclude-caches`, borg and restic would skip the results
    assert not (made / "CACHEDIR.TAG").exists()
    assert (
        (made / CACHE_DIR / "CACHEDIR.TAG")
        .read_bytes()
        .startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    )
    assert len(list(made.glob("*_demo.jsonl"))) == 1
    subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert RESULTS_DIR not in listed and "demo.yaml" in listed  # git sees nothing of it


def test_an_existing_directory_is_left_as_it_is(pytester: pytest.Pytester) -> None:
    """It may be a user's, with results committed on purpose."""
    (pytester.path / RESULTS_DIR).mkdir()
    make_spec(pytester, sim_spec(2))
    assert pytester.runpytest(*ARGS).ret == 0
    assert not (pytester.path / RESULTS_DIR / ".gitignore").exists()
    assert not (pytester.path / RESULTS_DIR / "CACHEDIR.TAG").exists()


def test_collecting_only_makes_nothing(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(2))
    assert pytester.runpytest(*ARGS, "--collect-only").ret == 0
    assert not (pytester.path / RESULTS_DIR).exists()


def test_the_entry_points_own_spelling_agrees() -> None:
    assert RESULTS_DIR in _ALWAYS_SKIP


def test_a_cache_where_earlier_versions_kept_it_stays_in_use(tmp_path: Path) -> None:
    """Its answers were paid for: ``bench_results/cache.sqlite``
    stays the default while it exists."""
    assert default_cache(tmp_path, create=True) == tmp_path / CACHE_DIR / CACHE_FILE
    assert (tmp_path / CACHE_DIR / "CACHEDIR.TAG").is_file()
    (tmp_path / CACHE_FILE).write_bytes(b"")
    assert default_cache(tmp_path, create=True) == tmp_path / CACHE_FILE
    assert (
        default_cache(tmp_path / "absent", create=False)
        == tmp_path / "absent" / CACHE_DIR / CACHE_FILE
    )
    assert not (tmp_path / "absent").exists()  # reading a default never makes it
