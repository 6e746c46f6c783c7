"""A results file anywhere (a shared volume, a job's scratch directory) moves nothing: not pytest's
rootdir, not the node ids, not where the cache and the default results go; in both forms of the
option, in one process and under xdist (``plugin.rootdir``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import make_spec, read_rows, sim_spec
from pytest_echo_bench.store.files import RESULTS_DIR

ARGS = ("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")
ITEMS = 4 * 2  # sim_spec(4): four items, two arms
WORKERS = {"serial": (), "xdist": ("-n", "2")}

# Each worker writes what it saw: its rootdir, a node id, and the
# PYTEST_ADDOPTS its subprocesses inherit.
RECORDER = """
import json, os
from pathlib import Path

def pytest_collection_finish(session):
    if hasattr(session.config, "workerinput") and session.items:
        seen = {"rootdir": str(session.config.rootpath), "nodeid": session.items[0].nodeid,
                "addopts": os.environ.get("PYTEST_ADDOPTS")}
        name = session.config.workerinput["workerid"] + ".json"
        (Path(__file__).parent / name).write_text(json.dumps(seen))
"""


def option(flag: str, value: Path, form: str) -> tuple[str, ...]:
    return (f"{flag}={value}",) if form == "eq" else (flag, str(value))


def summary(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(Path(f"{path}.summary.json").read_text())
    return loaded


def stayed(pytester: pytest.Pytester, result: pytest.RunResult, outside: Path) -> None:
    """The rootdir, node ids and side files all stayed in the project;
    the outside holds our files only."""
    result.stdout.fnmatch_lines([f"rootdir: {pytester.path}"])
    # where the default cache (and default results) go
    assert (pytester.path / RESULTS_DIR).is_dir()
    common = Path(*[a for a, b in zip(pytester.path.parts, outside.parts, strict=False) if a == b])
    assert not (common / RESULTS_DIR).exists() and not (outside / RESULTS_DIR).exists()
    for seen in map(json.loads, (p.read_text() for p in pytester.path.glob("gw*.json"))):
        assert seen["rootdir"] == str(pytester.path) and seen["nodeid"].startswith("demo.yaml::"), (
            seen
        )
        # the pin is for the worker's pytest, not its subprocesses
        assert seen["addopts"] is None, seen


@pytest.mark.parametrize("form", ["space", "eq"])
@pytest.mark.parametrize("workers", list(WORKERS))
def test_a_results_file_elsewhere_moves_nothing(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, form: str, workers: str
) -> None:
    outside = tmp_path_factory.mktemp("elsewhere")
    make_spec(pytester, sim_spec(4))
    pytester.makeconftest(RECORDER)
    out = outside / "x.jsonl"
    result = pytester.runpytest(
        *ARGS, *WORKERS[workers], *option("--bench-out", out, form), "--bench-progress-every", "0"
    )
    assert result.ret == 0, result.stdout.str()
    stayed(pytester, result, outside)
    # was to_run: 0 under xdist
    assert summary(out)["to_run"] == ITEMS and summary(out)["remaining"] == 0
    meta, rows = read_rows(out)
    assert (
        meta is not None
        and meta["spec_files"] == ["demo.yaml"]
        and meta["rootdir"] == str(pytester.path)
    )
    assert len(rows) == ITEMS


@pytest.mark.parametrize(
    ("workers", "form"), [("serial", "space"), ("serial", "eq"), ("xdist", "space")]
)
def test_a_resume_from_elsewhere_moves_nothing(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, form: str, workers: str
) -> None:
    """The file exists when pytest looks: the space form used to put the
    rootdir (and the cache) above both."""
    outside = tmp_path_factory.mktemp("elsewhere")
    make_spec(pytester, sim_spec(4))
    out = outside / "x.jsonl"
    first = pytester.runpytest(*ARGS, "demo.yaml", "--bench-out", str(out), "-k", "good")
    assert first.ret == 0
    pytester.makeconftest(RECORDER)
    result = pytester.runpytest(*ARGS, *WORKERS[workers], *option("--bench-resume", out, form))
    assert result.ret == 0, result.stdout.str()
    stayed(pytester, result, outside)
    _, rows = read_rows(out)
    # the recorded -k good, resumed as recorded
    assert sorted(r["arm"] for r in rows) == ["good"] * 4


def test_a_cache_elsewhere_that_exists_moves_nothing(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The second night's shared cache exists: it must not move the rootdir either."""
    outside = tmp_path_factory.mktemp("elsewhere")
    make_spec(pytester, sim_spec(4))
    cache = outside / "cache.sqlite"
    cache.touch()  # the file of an earlier night (SQLite takes an empty file for a new database)
    for night in (1, 2):
        result = pytester.runpytest(
            *ARGS, "demo.yaml", "--bench-cache", str(cache), "--bench-out", f"night{night}.jsonl"
        )
        assert result.ret == 0, result.stdout.str()
        result.stdout.fnmatch_lines([f"rootdir: {pytester.path}"])
    assert cache.is_file() and not (pytester.path.parent / RESULTS_DIR).exists()


def test_a_value_that_hid_the_ini_file_gets_it_back(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Bare ``--bench-resume /elsewhere/x.jsonl`` (the printed resume command) made pytest miss the
    project's ini file: the run takes it up again, its settings included."""
    outside = tmp_path_factory.mktemp("elsewhere")
    make_spec(pytester, sim_spec(4))
    pytester.makeini("[pytest]\nbench_progress_every = 0.001\n")
    out = outside / "x.jsonl"
    assert pytester.runpytest(*ARGS, "demo.yaml", "--bench-out", str(out), "-k", "good").ret == 0
    pytester.makeconftest(RECORDER)
    result = pytester.runpytest(*ARGS, "-n", "2", "--bench-resume", str(out), "-k", "bad")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"rootdir: {pytester.path}", "configfile: tox.ini"])
    # the ini says how often: lines between the first and the end (which of them is timing's choice)
    result.stdout.re_match_lines([r".*echo-bench: [1-4]/4 done · .*"])
    stayed(pytester, result, outside)


def test_an_ini_file_pytest_acted_on_too_early_is_refused_with_the_form_that_works(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Its addopts were never applied, and no plugin can apply them after the fact:
    refused, naming the ``=`` form."""
    outside = tmp_path_factory.mktemp("elsewhere")
    make_spec(pytester, sim_spec(4))
    pytester.makeini("[pytest]\naddopts = --bench-concurrency 2\n")
    out = outside / "x.jsonl"
    assert pytester.runpytest(*ARGS, "demo.yaml", "--bench-out", str(out), "-k", "good").ret == 0
    refused = pytester.runpytest(*ARGS, "--bench-resume", str(out))
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [
            f"*--bench-resume {out} for a test path*from no ini file instead of "
            f"{pytester.path / 'tox.ini'}*addopts*write --bench-resume={out}*"
        ]
    )
    again = pytester.runpytest(*ARGS, f"--bench-resume={out}")
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines([f"rootdir: {pytester.path}", "configfile: tox.ini"])


def test_the_meta_line_works_from_another_checkout(
    pytester: pytest.Pytester,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On another machine the project sits elsewhere: the meta line's paths are
    relative to the rootdir, its absolute rootdir only a hint, so a resume there finds
    the spec where that checkout keeps it."""
    make_spec(pytester, sim_spec(4))
    out = pytester.path / "results.jsonl"
    assert pytester.runpytest(*ARGS, "demo.yaml", "--bench-out", str(out), "-k", "good").ret == 0
    there = tmp_path_factory.mktemp("checkout")
    shutil.copy(pytester.path / "demo.yaml", there / "demo.yaml")
    moved = there / "results.jsonl"
    shutil.copy(out, moved)
    monkeypatch.chdir(there)
    result = pytester.runpytest(*ARGS, "--bench-resume", str(moved))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"rootdir: {there}", "*sweep complete*"])


def test_workers_import_no_conftest_above_the_rootdir(
    pytester: pytest.Pytester,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The controller never imports a conftest.py above its rootdir (pytest's conftest
    boundary): nor do its workers."""
    project = pytester.mkdir("project")
    (project / "demo.yaml").write_text(sim_spec(4))
    marker = pytester.path / "imported"
    pytester.makeconftest(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
    )
    monkeypatch.chdir(project)
    out = tmp_path_factory.mktemp("elsewhere") / "x.jsonl"
    result = pytester.runpytest(*ARGS, "-n", "2", "demo.yaml", "--bench-out", str(out))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"rootdir: {project}"])
    assert not marker.exists()
