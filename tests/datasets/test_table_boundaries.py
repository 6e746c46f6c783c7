"""Tables a loader must survive: a huge file with a small ``limit`` (only the window becomes Python
values, in bounded memory), columns of the wrong type (text as text, bytes as UTF-8, lists and
mappings refused naming file, record and column), and a byte order mark. ``loader: parquet`` and
``loader: hf`` alike; every file is written by the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.errors import SpecError

pa = pytest.importorskip("pyarrow", reason="needs pip install 'pytest-echo-bench[parquet]'")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
RSS_BOUND_MB = 300
HUGE_ROWS = 8_000_000


def write_spec(where: Path, dataset: str, loader: str = "parquet") -> Path:
    path = where / "set.yaml"
    path.write_text(f"benchmark: t\ndataset:\n  loader: {loader}\n{dataset}scorer: exact\n"
                    "arms:\n  ref: {provider: reference, template: '{target}'}\n")
    return path


def items(spec: Path) -> list[Example]:
    return load_benchmark(spec)[1]


@pytest.fixture
def offline_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets", reason="needs pip install 'pytest-echo-bench[hf]'")
    for key in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# -- a huge table, a small window ------------------------------------------------------------------


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """8M rows as Parquet (1.5 MB: one block of 100,000 rows written 80 times) and 2M as Arrow IPC,
    file and stream forms. Row i's id is "r{i % 100_000}", so a
    window's ids say where it was read."""
    tmp = tmp_path_factory.mktemp("huge")
    block = pa.table(
        {
            "rid": pa.array([f"r{i}" for i in range(100_000)]),
            "question": pa.array(["q?"] * 100_000),
            "answer": pa.array(["4"] * 100_000),
        }
    )
    with pq.ParquetWriter(tmp / "huge.parquet", block.schema) as writer:
        for _ in range(HUGE_ROWS // 100_000):
            writer.write_table(block)
    table = pa.concat_tables([block] * 20)
    with pa.OSFile(str(tmp / "huge.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as out:
        out.write_table(table, max_chunksize=500_000)
    with (
        pa.OSFile(str(tmp / "huge-stream.arrow"), "wb") as f,
        pa.ipc.new_stream(f, table.schema) as out,
    ):
        out.write_table(table)  # one batch of 2M rows: sliced, never made Python values whole
    return {
        "parquet": tmp / "huge.parquet",
        "arrow": tmp / "huge.arrow",
        "stream": tmp / "huge-stream.arrow",
    }


LOAD = """
import json, resource, sys
# reading the whole file dies here, not the machine
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from pathlib import Path
from pytest_echo_bench.datasets.registry import load_benchmark
examples = load_benchmark(Path(sys.argv[1]))[1]
# VmHWM, this process's own peak: ru_maxrss keeps, across exec, the mark of the worker it was
# forked from
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))
print(json.dumps({"ids": [e.id for e in examples], "inputs": [e.input for e in examples],
                  "rss_mb": peak // 1024}))
"""


@pytest.mark.parametrize(
    ("kind", "start"),
    [
        ("parquet", 0),
        ("parquet", HUGE_ROWS - 5),
        ("parquet", 4_321_000),
        ("arrow", 1_999_998),
        ("stream", 700_001),
    ],
)
def test_a_limit_reads_only_its_window_of_a_huge_table(
    huge: dict[str, Path], tmp_path: Path, kind: str, start: int
) -> None:
    """Before, the whole table was converted first: MemoryError (INTERNALERROR in a run)."""
    fields = "  fields: {id: rid, input: '{question}', target: answer}\n"
    spec = write_spec(tmp_path, f"  path: {huge[kind]}\n  start: {start}\n  limit: 5\n{fields}")
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows = HUGE_ROWS if kind == "parquet" else 2_000_000
    assert result["ids"] == [f"r{i % 100_000}" for i in range(start, min(start + 5, rows))]
    assert result["inputs"] == ["q?"] * len(result["ids"])
    assert result["rss_mb"] < RSS_BOUND_MB, result


def test_the_window_of_csv_and_json_lines_ends_their_reading(tmp_path: Path) -> None:
    # A broken line after the window is never read: the reading stopped at the window's end.
    (tmp_path / "set.jsonl").write_text("".join(json.dumps({"input": f"q{i}", "target": "1"}) + "\n"
                                                for i in range(5)) + "{broken\n")
    (tmp_path / "set.csv").write_text(
        "input,target\n" + "".join(f"q{i},1\n" for i in range(5)) + "x" * 200_000 + ",1\n"
    )
    for name in ("set.jsonl", "set.csv"):
        assert [
            e.input
            for e in items(write_spec(tmp_path, f"  path: {name}\n  start: 2\n  limit: 3\n"))
        ] == ["q2", "q3", "q4"]
        with pytest.raises(
            SpecError, match=r"set\.(jsonl|csv) (line 6 is not valid JSON|is not readable CSV)"
        ):
            items(write_spec(tmp_path, f"  path: {name}\n  start: 2\n"))


# -- columns of the wrong type ---------------------------------------------------------------------

TYPED = [
    {
        "rid": "a",
        "question": b"caf\xc3\xa9",
        "answer": "1",
        "meta": {"k": 2},
        "tags": ["x"],
        "n": 7,
        "flag": True,
        "raw": b"\xff\xfe",
    }
]
REFUSED = [
    (
        "{question} {meta}",
        "answer",
        "rid",
        r"column 'meta' holds a mapping \(\{\"k\": 2\}\), not text",
    ),
    ("{question}", "tags", "rid", r"column 'tags' holds a list \(\[\"x\"\]\), not text"),
    ("{question}", "answer", "meta", r"column 'meta' holds a mapping"),
    (
        "{raw}",
        "answer",
        "rid",
        r"column 'raw' holds bytes that are not UTF-8 text \(byte 0xff at offset 0\)",
    ),
]


@pytest.mark.parametrize("loader", ["parquet", "hf"])
def test_text_columns_are_text_and_others_are_refused_naming_file_record_and_column(
        tmp_path: Path, request: pytest.FixtureRequest, loader: str) -> None:
    """Before: "b'caf\\xc3\\xa9'" and "{'k': 2}" went to the model as the prompt."""
    if loader == "hf":
        request.getfixturevalue("offline_hf")
    pq.write_table(pa.Table.from_pylist(TYPED), tmp_path / "typed.parquet")
    ok = "  fields: {id: rid, input: '{question} {n} {flag}', target: answer}\n"
    (got,) = items(write_spec(tmp_path, f"  path: typed.parquet\n{ok}", loader))
    assert (got.id, got.input, got.target) == ("a", "café 7 True", "1")
    for template, target, ident, message in REFUSED:
        fields = f"  fields: {{id: {ident}, input: '{template}', target: {target}}}\n"
        with pytest.raises(
            SpecError,
            match=r"set.yaml:\d+ \[dataset.fields.*\]: dataset \S*typed.parquet record 0: "
            + message,
        ):
            items(write_spec(tmp_path, f"  path: typed.parquet\n{fields}", loader))


def test_options_are_text_too(tmp_path: Path) -> None:
    rows = [{"q": "pick", "a": b"yes", "b": {"no": 1}, "ok": "yes"}]
    (tmp_path / "set.jsonl").write_text(
        json.dumps({"q": "pick", "a": "yes", "b": {"no": 1}, "ok": "yes"}) + "\n"
    )
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "set.parquet")
    for name in ("set.jsonl", "set.parquet"):
        spec = write_spec(
            tmp_path,
            f"  path: {name}\n  fields: {{input: '{{q}}', target: ok}}\n  choices: [a, b]\n",
        )
        with pytest.raises(
            SpecError,
            match=rf"\[dataset.choices\]: dataset \S*{name} record 0: column 'b' holds a "
            r"mapping",
        ):
            items(spec)


# -- a byte order mark -----------------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"
BOMMED = {
    "set.csv": BOM + b"rid,question,answer\nq1,hello,1\n",
    "set.json": BOM + json.dumps([{"rid": "q1", "question": "hello", "answer": "1"}]).encode(),
    "set.jsonl": BOM
    + json.dumps({"rid": "q1", "question": "hello", "answer": "1"}).encode()
    + b"\n",
}


@pytest.mark.parametrize("loader", ["parquet", "hf"])
@pytest.mark.parametrize("name", sorted(BOMMED))
def test_a_byte_order_mark_is_no_part_of_the_first_column(
    tmp_path: Path, request: pytest.FixtureRequest, loader: str, name: str
) -> None:
    """Before: "no value in field 'rid' (the record has \ufeffrid, ...)", a
    message that contradicts itself."""
    if loader == "hf":
        request.getfixturevalue("offline_hf")
    (tmp_path / name).write_bytes(BOMMED[name])
    fields = "  fields: {id: rid, input: '{question}', target: answer}\n"
    (got,) = items(write_spec(tmp_path, f"  path: {name}\n{fields}", loader))
    assert (got.id, got.input, got.target) == ("q1", "hello", "1")


# -- any column types ------------------------------------------------------------------------------

SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
)
CELL = (
    SCALAR
    | st.binary(max_size=4)
    | st.lists(SCALAR, max_size=2)
    | st.dictionaries(st.text(max_size=3), SCALAR, max_size=2)
)


def expected_text(value: Any) -> str | None:
    """What the rule makes of a cell: its text, or None where it must be refused."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, dict | list):
        return None
    return "" if value is None else value if isinstance(value, str) else str(value)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(CELL, CELL), min_size=1, max_size=4), st.booleans())
def test_any_column_types_give_faithful_text_or_an_error_naming_record_and_column(
    tmp_path_factory: pytest.TempPathFactory, cells: list[tuple[Any, Any]], columnar: bool
) -> None:
    tmp = tmp_path_factory.mktemp("cells")
    rows = [{"id": f"i{n}", "question": q, "answer": a} for n, (q, a) in enumerate(cells)]
    # Parquet holds one type per column: each column's cells made its first cell's type
    if columnar:
        try:
            pq.write_table(pa.Table.from_pylist(rows), tmp / "set.parquet")
        except (pa.ArrowException, OverflowError):
            return  # cells of several types in one column: no Parquet file holds them
        rows = pq.read_table(tmp / "set.parquet").to_pylist()
        name = "set.parquet"
    else:
        if any(isinstance(v, bytes) for row in rows for v in row.values()):
            return  # JSON has no bytes
        (tmp / "set.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        name = "set.jsonl"
    spec = write_spec(
        tmp, f"  path: {name}\n  fields: {{id: id, input: 'Q {{question}}', target: answer}}\n"
    )
    try:
        got = items(spec)
    except SpecError as exc:
        bad = next((n, c) for n, row in enumerate(rows) for c in ("answer", "question") if (
            expected_text(row[c]) is None or (c == "answer" and row[c] is None)))
        assert f"{name} record {bad[0]}: " in str(exc) and f"'{bad[1]}'" in str(exc), str(exc)
        return
    assert [(e.input, e.target) for e in got] == [
        (f"Q {expected_text(r['question'])}", expected_text(r["answer"])) for r in rows
    ]


def test_the_jsonl_and_inline_loaders_read_a_bom_and_binary_text(tmp_path: Path) -> None:
    """The loaders without a field map: a BOM'd JSON Lines file
    reads; YAML's !!binary is its text."""
    (tmp_path / "set.jsonl").write_bytes(BOM + b'{"id": "a", "input": "x", "target": "1"}\n')
    (got,) = items(write_spec(tmp_path, "  path: set.jsonl\n", "jsonl"))
    assert (got.id, got.input) == ("a", "x")
    binary = "  items:\n    - {id: a, input: !!binary aGVsbG8=, target: '1'}\n"  # "hello"
    (got,) = items(write_spec(tmp_path, binary, "inline"))
    assert got.input == "hello"
    with pytest.raises(
        SpecError, match=r"\[dataset.items.0\]: input holds bytes that are not UTF-8 text"
    ):
        items(write_spec(tmp_path, binary.replace("aGVsbG8=", "//4="), "inline"))


def test_a_sweep_over_a_column_of_mappings_stops_at_collection_naming_it(
    pytester: pytest.Pytester,
) -> None:
    """End to end: the run names file, record and column and sends nothing (before, the prompt was
    "q {'k': 2}" and the sweep passed)."""
    pq.write_table(
        pa.Table.from_pylist([{"rid": "a", "meta": {"k": 2}, "answer": "1"}]),
        pytester.path / "t.parquet",
    )
    write_spec(
        pytester.path, "  path: t.parquet\n  fields: {id: rid, input: 'q {meta}', target: answer}\n"
    )
    out = pytester.path / "run.jsonl"
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-out", str(out))
    assert result.ret not in (0, pytest.ExitCode.INTERNAL_ERROR)
    result.stdout.fnmatch_lines(
        [
            "*set.yaml:*dataset *t.parquet record 0: column 'meta' holds a mapping ({\"k\": 2}), "
            "not text*"
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()
    assert not out.exists() or all('"_meta"' in line for line in out.read_text().splitlines())
