"""Bad specs fail collection with a message naming file, line and key, and write nothing."""

from __future__ import annotations

import pytest

from conftest import Sweep, inline_items, make_spec, sim_spec


def spec_with(arms: str = "  a: {provider: sim}", scorer: str = "exact", dataset: str = "") -> str:
    dataset = dataset or f"  loader: inline\n  items:\n{inline_items(2)}"
    return f"benchmark: demo\ndataset:\n{dataset}\nscorer: {scorer}\narms:\n{arms}\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            spec_with(arms="  a: {provider: nope}"),
            "*demo.yaml:9 [[]arms.a.provider[]]: unknown provider 'nope'; known: *",
        ),
        (spec_with(scorer="fuzzy"), "*demo.yaml:7 [[]scorer[]]: unknown scorer 'fuzzy'*"),
        (
            spec_with() + "retrys: {attempts: 2}\n",
            "*demo.yaml:10 [[]retrys[]]: unknown key 'retrys'*",
        ),
        (
            spec_with(arms="  a: {provider: sim, accuracy: 2}"),
            "*[[]arms.a.accuracy[]]: accuracy must be between 0 and 1*",
        ),
        (
            spec_with(arms="  a: {provider: sim, acuracy: 1}"),
            "*[[]arms.a.acuracy[]]: unknown sim option 'acuracy'*",
        ),
        (
            spec_with(arms="  a: {model: x}"),
            "*demo.yaml:9 [[]arms.a[]]: an arm needs a 'provider'*",
        ),
        (
            spec_with(dataset="  loader: jsonl\n  path: missing.jsonl"),
            "*[[]dataset.path[]]: dataset not found:*missing.jsonl*",
        ),
        (
            spec_with(dataset="  loader: csv"),
            "*[[]dataset.loader[]]: unknown loader 'csv'; known loaders: bbh, hf, "
            "humaneval, inline, jsonl, mmlu_pro, mt_bench, parquet*",
        ),
        (
            spec_with(
                dataset="  loader: inline\n  items:\n    - {id: a, input: x, target: y}\n    - "
                "{id: a, input: z, target: y}"
            ),
            "*duplicate task id 'a' (item 1)*",
        ),
        (
            spec_with(dataset="  loader: inline\n  items:\n    - {id: a, input: x}"),
            "*demo.yaml:5 [[]dataset.items.0[]]: item is missing 'target'*",
        ),
        (
            spec_with(arms="  a: {provider: sim, template: '${NOT_SET_ANYWHERE}'}"),
            "*[[]arms.a.template[]]: environment variable NOT_SET_ANYWHERE is not set*",
        ),
        (
            "benchmark: demo\narms:\n  a: {provider: sim}\ndataset: [1, 2\n",
            "*demo.yaml:4: malformed YAML*",
        ),
    ],
    ids=[
        "provider",
        "scorer",
        "top-key",
        "accuracy",
        "sim-option",
        "no-provider",
        "missing-dataset",
        "loader",
        "duplicate-ids",
        "missing-target",
        "env",
        "malformed",
    ],
)
def test_bad_spec_is_a_collection_error_naming_the_place(
    pytester: pytest.Pytester, sweep: Sweep, body: str, expected: str
) -> None:
    make_spec(pytester, body)
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*echo-bench: invalid benchmark spec: *" + expected.lstrip("*")])
    assert "Traceback" not in result.stdout.str()
    assert rows == []


def test_jsonl_dataset_error_names_the_data_line(pytester: pytest.Pytester, sweep: Sweep) -> None:
    (pytester.path / "data.jsonl").write_text('{"id": "a", "input": "x", "target": "y"}\n{oops\n')
    make_spec(pytester, spec_with(dataset="  loader: jsonl\n  path: data.jsonl"))
    result, _, _ = sweep.run()
    result.stdout.fnmatch_lines(["*data.jsonl:2: not valid JSON*"])


def test_env_vars_expand_in_strings(
    pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSWER_STYLE", "The answer is {answer}.")
    make_spec(
        pytester,
        spec_with(
            arms="  a: {provider: sim, accuracy: 1.0, template: '${ANSWER_STYLE}'}",
            scorer="{name: regex, pattern: 'answer is (\\w+)'}",
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0
    assert rows[0]["output"] == "The answer is 4."


def test_duplicate_benchmark_names_are_refused(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(1), name="one")
    make_spec(pytester, sim_spec(1), name="two")
    result, _, _ = sweep.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*benchmark name 'demo' is also used by*give each spec its own name*"]
    )


def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(1))
    result, _, _ = sweep.run("--bench-concurrency", "many")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--bench-concurrency must be a whole number from 1 to 1024, got 'many'*"]
    )


def test_an_optional_dataset_that_is_missing_skips_the_spec(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(
        pytester,
        spec_with(
            dataset="  loader: jsonl\n  path: ${NO_SUCH_DATA:-missing.jsonl}\n  optional: true"
        ),
    )
    make_spec(pytester, sim_spec(2, benchmark="other"), name="other")
    result, _, rows = sweep.run("-rs")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*SKIPPED*dataset not found*missing.jsonl (demo.yaml marks it optional*"]
    )
    assert {r["benchmark"] for r in rows} == {"other"}
