"""The spec boundary under generated input: a spec file is read by ``spec/load.py`` into a valid
spec or refused with a SpecError naming the file and a line or key; never another exception,
never unbounded time or memory.

Hypothesis writes the documents: random YAML structures, wrong types for every key of a valid
spec, odd unicode and raw bytes, anchors and aliases (bombs included), huge numbers, deep nesting.
In-process and fast; every example that once found a bug is kept below as a plain test. The last
tests run pytest on the worst paths a spec can name (a FIFO, /dev/zero, /dev/null, a bomb).
"""

from __future__ import annotations

import copy
import os
import stat
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_spec, sim_spec
from pytest_echo_bench.datasets.registry import load_examples
from pytest_echo_bench.engine.fingerprint import spec_fingerprint
from pytest_echo_bench.errors import SpecError
from pytest_echo_bench.spec.load import TOP_KEYS, Spec, load_spec
from pytest_echo_bench.spec.parse import MAX_ALIAS_NODES, MAX_DEPTH, MAX_SPEC_BYTES

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

VALID: dict[str, Any] = {
    "benchmark": "demo",
    "description": "a spec every mutation starts from",
    "dataset": {
        "loader": "inline",
        "items": [
            {"id": "q1", "input": "2+2?", "target": "4"},
            {"id": "q2", "input": "3+3?", "target": "6", "subtask": "add"},
        ],
        "start": 0,
        "limit": 2,
    },
    "scorer": {"name": "exact"},
    "arms": {
        "a": {
            "provider": "sim",
            "accuracy": 0.5,
            "concurrency": 2,
            "optional": False,
            "rate_limit": {"requests_per_minute": 60},
        },
        "b": {"provider": "sim"},
    },
    "retries": {"attempts": 3, "backoff_s": 0.5, "max_backoff_s": 4},
    "timeout_s": 30,
    "errors": {"exhaustion": ["quota"], "transient": ["overloaded"]},
    "concurrency": 4,
    "pricing": {"a": {"input": 1.0, "output": 2.0}, "unit": {"arm": "a", "prompt_tokens": 100}},
    "epochs": 2,
}


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("specs") / "generated.yaml"


def outcome(path: Path, data: bytes) -> Spec | None:
    """Load ``data`` as a spec: the spec, or None after checking the SpecError says where."""
    path.write_bytes(data)
    try:
        spec = load_spec(path, environ={})
    except SpecError as exc:
        assert exc.path == str(path), exc
        assert exc.line is not None or exc.key, f"no line or key: {exc}"
        return None
    if spec.dataset.get("loader") == "inline":  # what collection does next, in the same process
        try:
            spec_fingerprint(spec, load_examples(spec))
        except SpecError as exc:
            assert exc.path == str(path) and (exc.line is not None or exc.key), exc
    return spec


# -- generated documents --------------------------------------------------------------------

ODD_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12
) | st.sampled_from(
    [
        "",
        " ",
        "\u202e",
        "\u200b",
        "\ufeff",
        "\x85",
        "\u2028",
        "${NOT_SET}",
        "${X:-d}",
        "~",
        "null",
        "yes",
        "on",
        "0x1F",
        "1e999",
        ".nan",
        "2001-02-30",
        "<<",
        "&a",
        "*a",
        "!!binary",
        "- -",
        ": :",
        "#",
        "'",
        '"',
    ]
)
NUMBERS = st.integers() | st.sampled_from([10**400, -(10**400), 2**63, 0, -1]) | st.floats()
SCALARS = st.none() | st.booleans() | NUMBERS | ODD_TEXT | st.dates() | st.binary(max_size=8)
KEYS = (
    st.sampled_from(
        sorted(TOP_KEYS)
        + [
            "loader",
            "items",
            "id",
            "input",
            "target",
            "provider",
            "name",
            "path",
            "arm",
            "attempts",
            "unit",
            "input",
        ]
    )
    | ODD_TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(KEYS, kids, max_size=4),
    max_leaves=24,
)


def dumped(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False).encode(
        "utf-8", "surrogatepass"
    )


@PROPERTY
@given(VALUES)
def test_any_yaml_structure_is_a_spec_or_a_spec_error(spec_file: Path, value: Any) -> None:
    outcome(spec_file, dumped(value))


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield from _paths(child, (*at, key))


# every key and item of the valid spec
EVERY_PATH = sorted((p for p in _paths(VALID) if p), key=repr)


@PROPERTY
@given(st.sampled_from(EVERY_PATH), VALUES | st.just(KeyError), st.data())
def test_a_wrong_value_anywhere_in_a_valid_spec_is_a_spec_error_or_still_valid(
        spec_file: Path, where: tuple[Any, ...], value: Any, data: st.DataObject) -> None:
    spec = copy.deepcopy(VALID)
    parent = spec
    for key in where[:-1]:
        parent = parent[key]
    if value is KeyError:  # a key removed
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    if data.draw(st.booleans()) and isinstance(parent, dict):
        parent[data.draw(KEYS)] = data.draw(VALUES)  # and an unknown key beside it
    outcome(spec_file, dumped(spec))


@PROPERTY
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_is_a_spec_error(spec_file: Path, text: str) -> None:
    outcome(spec_file, text.encode("utf-8", "surrogatepass"))


@PROPERTY
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_a_spec_error(spec_file: Path, data: bytes) -> None:
    outcome(spec_file, data)


TAGS = st.sampled_from(
    [
        "",
        "!!str ",
        "!!int ",
        "!!float ",
        "!!bool ",
        "!!null ",
        "!!timestamp ",
        "!!binary ",
        "!!set ",
        "!!omap ",
        "!!python/object:os.system ",
        "!custom ",
        "!!map ",
        "!!seq ",
    ]
)


@st.composite
def aliased(draw: st.DrawFn) -> str:
    """A spec whose values are built from anchors, aliases, merges and tags, up to bomb sizes."""
    levels, fan = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    leaf = draw(
        st.sampled_from(["{id: a, input: b, target: c}", "x", "[1, 2]", "{provider: sim}", "''"])
    )
    lines = [f"base: &l0 {draw(TAGS)}{leaf}"]
    for i in range(1, levels + 1):
        ref = f"*l{i - 1}"
        body = (
            f"{{<<: [{', '.join([ref] * fan)}]}}"
            if draw(st.booleans()) and leaf.startswith("{")
            else f"[{', '.join([ref] * fan)}]"
        )
        lines.append(f"l{i}: &l{i} {body}")
    target = draw(st.sampled_from(["dataset", "arms", "scorer", "items", "description"]))
    deepest = f"*l{draw(st.integers(0, levels))}"
    doc = {
        "dataset": f"{{loader: inline, items: {deepest}}}",
        "arms": "{a: {provider: sim}}",
        "scorer": "exact",
    }
    doc[target if target in doc else "description"] = deepest
    if draw(st.booleans()):
        lines.append(f"again: &l0 {deepest}")  # an anchor redefined after use
    if draw(st.booleans()):
        lines.append("self: &me [*me]" if draw(st.booleans()) else "self: &me {a: *me}")
    body = "\n".join(lines) + "\n" + "".join(f"{k}: {v}\n" for k, v in doc.items())
    return "benchmark: demo\n" + body


@PROPERTY
@given(aliased())
def test_anchors_and_aliases_are_bounded(spec_file: Path, text: str) -> None:
    outcome(spec_file, text.encode())


@PROPERTY
@given(st.integers(1, 1200), st.sampled_from(["[", "{a: ", "- "]))
def test_deep_nesting_is_a_spec_error_or_valid(spec_file: Path, depth: int, opener: str) -> None:
    closer = {"[": "]", "{a: ": "}", "- ": ""}[opener]
    if opener == "- ":
        nested = "".join(f"{'  ' * i}- \n" for i in range(depth)) + "  " * depth + "x\n"
        text = "benchmark: demo\ndescription:\n" + textwrap.indent(nested, "  ")
    else:
        text = f"benchmark: demo\ndescription: {opener * depth}x{closer * depth}\n"
    spec = outcome(
        spec_file,
        (text + "dataset: {loader: inline}\nscorer: exact\narms: {a: {provider: sim}}\n").encode(),
    )
    if depth > MAX_DEPTH:
        assert spec is None  # refused, at its line (libyaml refuses beyond 1,000 itself)
    elif depth < MAX_DEPTH - 2:  # the document and its key add a level or two
        assert spec is not None


# -- the examples that found bugs, kept as plain tests --------------------------------------

BOMB = (
    "benchmark: bomb\n"
    + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else "l0: &l0 [lol]\n"
        for i in range(10)
    )
    + "dataset: {loader: inline, items: *l9}\nscorer: exact\narms: {a: {provider: sim}}\n"
)

FOUND = {
    # was MemoryError after 50 s: every walk of the data expanded the aliases
    "alias bomb": (BOMB, f"aliases expand the document by more than {MAX_ALIAS_NODES:,} nodes"),
    # was RecursionError: an alias inside its own anchor
    "recursive alias": (
        "benchmark: demo\ndescription: &a [*a]\n",
        "refers to a node that contains it",
    ),
    # were ValueError out of PyYAML's constructors
    "impossible date": (
        "benchmark: demo\ntimeout_s: 2001-02-30\n",
        "day is out of range for month",
    ),
    "5000-digit integer": ("benchmark: demo\nepochs: " + "9" * 5000 + "\n", "Exceeds the limit"),
    # was OverflowError in int(inf)
    "infinite tokens": (
        "benchmark: demo\ndataset: {loader: inline}\nscorer: exact\narms: {a: {provider: sim}}\n"
        "pricing: {a: {input: 1}, unit: {arm: a, prompt_tokens: .inf}}\n",
        "must be a finite number",
    ),
    # accepted, then the run overflowed the clock or looped 10**100 epochs
    "huge timeout": (
        "benchmark: demo\ndataset: {loader: inline}\nscorer: exact\narms: {a: {provider: sim}}\n"
        "timeout_s: 1.0e+300\n",
        "must be at most 86,400",
    ),
    "huge epochs": (
        "benchmark: demo\ndataset: {loader: inline}\nscorer: exact\narms: {a: {provider: sim}}\n"
        f"epochs: {10**100}\n",
        "must be at most 1,000",
    ),
    # was TypeError in sorting mixed keys when fingerprinting (`yes:` is True in YAML)
    "a key that is not text": (
        "benchmark: demo\narms: {a: {provider: sim, yes: 1}}\n",
        "mapping key 'yes' is not text",
    ),
    # found by generation: TypeError (a list in `in`), KeyError out of PyYAML, an error with no line
    "unhashable unit arm": (
        "benchmark: demo\ndataset: {loader: inline}\nscorer: exact\narms: {a: {provider: sim}}\n"
        "pricing: {a: {input: 1}, unit: {arm: [], prompt_tokens: 1}}\n",
        "pricing.unit.arm must name a priced arm",
    ),
    "not a bool": ("benchmark: demo\ndescription: !!bool x\n", "cannot read this value"),
    "control character": (
        "benchmark: demo\ndescription: a\x1fb\n",
        "control characters are not allowed .* column 15",
    ),
    "too deep": (
        "benchmark: demo\ndescription: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n",
        f"nested more than {MAX_DEPTH} levels deep",
    ),
    # killed the process (a segmentation fault): libyaml's composer recurses in C once per level
    # (a libyaml that bounds nesting itself refuses it first, in its own words)
    "100,000 open brackets": (
        "benchmark: " + "[" * 100_000 + "\n",
        f"nested more than {MAX_DEPTH} levels deep|exceeded maximum nesting depth",
    ),
    "100,000 dashes": (
        "benchmark: demo\ndescription:\n  " + "- " * 100_000 + "x\n",
        f"nested more than {MAX_DEPTH} levels deep",
    ),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_a_spec_that_once_broke_the_loader_is_a_spec_error_with_its_line(
    spec_file: Path, name: str
) -> None:
    text, expected = FOUND[name]
    spec_file.write_text(text)
    with pytest.raises(SpecError, match=expected) as caught:
        load_spec(spec_file, environ={})
    assert caught.value.path == str(spec_file) and caught.value.line is not None


def test_an_inline_item_that_cannot_be_text_is_a_spec_error(spec_file: Path) -> None:
    # were TypeError: a date inside an item's input (json.dumps), metadata that is a list (dict())
    for item, expected in (
        ("{id: a, input: {x: [2001-01-01]}, target: c}", "input must be text, a number, or JSON"),
        ("{id: a, input: b, target: c, metadata: [1, 2]}", "metadata must be a mapping, got list"),
    ):
        spec_file.write_text(
            f"benchmark: demo\ndataset: {{loader: inline, items: [{item}]}}\nscorer: exact\n"
            "arms: {a: {provider: sim}}\n"
        )
        with pytest.raises(SpecError, match=expected) as caught:
            load_examples(load_spec(spec_file, environ={}))
        assert caught.value.line == 2 and caught.value.key == "dataset.items.0"


def test_a_spec_over_the_size_limit_is_refused_unread(spec_file: Path) -> None:
    with open(spec_file, "wb") as f:
        f.truncate(MAX_SPEC_BYTES + 1)  # sparse: the limit is checked before the file is read
    with pytest.raises(
        SpecError, match=f"is {MAX_SPEC_BYTES + 1:,} bytes, over the limit of {MAX_SPEC_BYTES:,}"
    ):
        load_spec(spec_file)


# -- the worst paths, through pytest ----------------------------------------------------------

def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def side_files(path: str) -> dict[str, tuple[int, float] | None]:
    """What exists at each side-file name of ``path`` (they must not appear, nor change)."""
    seen: dict[str, tuple[int, float] | None] = {}
    for suffix in ("", ".owner", ".lock", ".torn", ".stop.json", ".lost", ".summary.json"):
        try:
            st_ = os.stat(path + suffix)
            seen[suffix] = (st_.st_ino, st_.st_mtime)
        except FileNotFoundError:
            seen[suffix] = None
    return seen


@pytest.mark.parametrize("dataset", ["fifo", "/dev/zero", "directory"])
def test_a_dataset_path_that_is_no_regular_file_is_a_collection_error(
    pytester: pytest.Pytester, dataset: str
) -> None:
    path = {
        "fifo": lambda: str(fifo(pytester.path / "data.jsonl")),
        "/dev/zero": lambda: "/dev/zero",
        "directory": lambda: str((pytester.path / "data").mkdir() or pytester.path / "data"),
    }[dataset]()
    make_spec(pytester, "benchmark: demo\ndataset:\n  loader: jsonl\n  path: " + path
              + "\nscorer: exact\narms:\n  a: {provider: sim}\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--bench-out", str(pytester.path / "r.jsonl"), timeout=60
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    kind = {
        "fifo": "a FIFO (named pipe)",
        "/dev/zero": "a character device",
        "directory": "a directory",
    }[dataset]
    result.stdout.fnmatch_lines(
        [f"*demo.yaml:4 [[]dataset.path[]]: dataset path {path} is {kind}, not a regular file*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert no_results_file(pytester.path / "r.jsonl")


def no_results_file(out: Path) -> bool:
    """Neither the results file nor its owner or lock file: only the
    run's summary says how it ended."""
    return sorted(p.name for p in out.parent.glob(f"{out.name}*")) in (
        [],
        [f"{out.name}.summary.json"],
    )


def test_a_jsonl_line_longer_than_the_limit_is_refused_by_its_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_echo_bench.datasets import loaders

    monkeypatch.setattr(loaders, "MAX_LINE_BYTES", 64)
    (pytester.path / "data.jsonl").write_text(
        '{"id": "a", "input": "b", "target": "c"}\n{"id": "' + "x" * 100 + '"}\n'
    )
    spec = load_spec(
        make_spec(
            pytester,
            "benchmark: demo\ndataset: {loader: jsonl, path: data.jsonl}\n"
            "scorer: exact\narms: {a: {provider: sim}}\n",
        )
    )
    with pytest.raises(SpecError, match=r"data.jsonl:2: line is longer than 64 bytes"):
        load_examples(spec)


@pytest.mark.parametrize("out", ["/dev/null", "/dev/full", "fifo", "directory"])
def test_an_output_path_that_is_no_regular_file_is_a_usage_error_with_no_side_files(
        pytester: pytest.Pytester, out: str) -> None:
    make_spec(pytester, sim_spec(2))
    path = {
        "fifo": lambda: str(fifo(pytester.path / "r.jsonl")),
        "directory": lambda: str(pytester.path),
    }.get(out, lambda: out)()
    before = side_files(path)
    for option in ("--bench-out", "--bench-resume", "--bench-html", "--bench-cache"):
        result = pytester.runpytest("-p", "no:cacheprovider", "demo.yaml", option, path)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [f"*{option} {path}: is a *, not a regular file; name a regular file*"]
        )
        assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert side_files(path) == before
    if out == "fifo":
        assert stat.S_ISFIFO(os.stat(path).st_mode)


def test_an_alias_bomb_spec_is_a_collection_error_in_well_under_a_second(
    pytester: pytest.Pytester,
) -> None:
    make_spec(pytester, BOMB)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--bench-out", str(pytester.path / "r.jsonl")
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*demo.yaml:*: aliases expand the document by more than 100,000 nodes*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert no_results_file(pytester.path / "r.jsonl")


def test_a_fifo_named_like_a_spec_is_not_opened_by_discovery(pytester: pytest.Pytester) -> None:
    make_spec(pytester, sim_spec(1))
    fifo(pytester.path / "pipe.yaml")  # would block the sniff's open() until a writer came
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--bench-out", str(pytester.path / "r.jsonl"), timeout=60
    )
    assert result.ret == 0
    result.assert_outcomes(passed=1, failed=1)  # the sim arms "good" and "bad": the sweep ran


def test_bbh_paths_are_checked_before_they_are_opened(tmp_path: Path) -> None:
    from pytest_echo_bench.suites.bbh import load

    tasks = tmp_path / "bbh"
    (tasks / "odd.json").mkdir(parents=True)  # a task "file" that is a directory
    (tmp_path / "secret.json").write_text('{"examples": [{"input": "x", "target": "y"}]}')
    spec_file = tmp_path / "bbh.yaml"
    cases = {
        f"{{loader: bbh, path: {tasks / 'odd.json'}/..}}": None,
        f"{{loader: bbh, path: {tmp_path / 'secret.json'}}}": "is a regular file, not a directory",
        "{loader: bbh, path: bbh, subtasks: [../secret]}": (
            "subtasks must be a list of BBH task names"
        ),
        "{loader: bbh, path: bbh, subtasks: [odd]}": "odd.json is a directory, not a regular file",
        "{loader: bbh, path: bbh, subtasks: [ok], cot_prompts: secret.json}": (
            "cot_prompts .*secret.json is a regular file, not a directory"
        ),
    }
    (tasks / "ok.json").write_text('{"examples": [{"input": "x", "target": "y"}]}')
    for dataset, expected in cases.items():
        spec_file.write_text(
            f"benchmark: b\ndataset: {dataset}\nscorer: bbh\narms: {{a: {{provider: sim}}}}\n"
        )
        spec = load_spec(spec_file)
        if expected is None:
            # found by the glob, refused all the same
            with pytest.raises(SpecError, match="odd.json is a directory"):
                load(spec)
            continue
        with pytest.raises(SpecError, match=expected) as caught:
            load(spec)
        assert caught.value.line == 2 and caught.value.key.startswith("dataset.")
