"""A fingerprint mismatch names what changed; the endpoint is not part
of what the answers depend on.

Driven as a user meets it: a sweep against a loopback server, the spec edited, then a resume,
a regrade and a merge; files written when the endpoint was in the fingerprint still resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.engine.fingerprint import changed_parts


def openai_spec(
    n: int, arms: tuple[str, ...] = ("a", "b"), url: str = "${BENCH_URL}", model: str = "m"
) -> str:
    body = "".join(f"  {a}:\n    provider: openai\n    model: {model}-{a}\n    base_url: {url}\n"
                   "    api_key_env: TEST_OPENAI_KEY\n" for a in arms)
    return sim_spec(n, arms=body)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, openai_server: FakeOpenAI) -> FakeOpenAI:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-0123456789")
    monkeypatch.setenv("BENCH_URL", openai_server.base_url)
    openai_server.answer = lambda prompt: "4"
    return openai_server


def test_moving_the_endpoint_does_not_block_a_resume(
    pytester: pytest.Pytester, sweep: Sweep, served: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_spec(pytester, openai_spec(3))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 6
    # as if stopped there
    sweep.out.write_text("".join(sweep.out.read_text().splitlines(keepends=True)[:-2]))
    monkeypatch.setenv("BENCH_URL", served.base_url.replace("127.0.0.1", "localhost"))
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0, result.stderr.str()
    assert len(rows) == 6 == len({(r["task_id"], r["arm"]) for r in rows})


def test_a_changed_model_is_named_with_its_arm_and_key(
    pytester: pytest.Pytester, sweep: Sweep, served: FakeOpenAI
) -> None:
    make_spec(pytester, openai_spec(2))
    assert sweep.run()[0].ret == 0
    make_spec(pytester, openai_spec(2, arms=("a", "b", "c"), model="other"))
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*was recorded with fingerprint*changed: arm 'a' (key 'model'), arm 'b' (key 'model'), "
            "arm 'c' (new).*--bench-allow-mismatch*"
        ]
    )


def test_a_changed_dataset_and_scorer_are_named(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, sim_spec(2))
    assert sweep.run()[0].ret == 0
    make_spec(pytester, sim_spec(3).replace("scorer: exact", "scorer: numeric"))
    result, _, _ = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*changed: the dataset, the scorer.*"])


def _old_fingerprint(meta: dict[str, Any], spec_arms: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The fingerprint and arms digest as files recorded them when the endpoint was part of them
    (the formula written out here, independent of the code under test)."""
    def digest(data: Any) -> str:
        return hashlib.sha256(
            json.dumps(data, sort_keys=True, ensure_ascii=True, default=str).encode()
        ).hexdigest()[:16]

    parts = next(iter(meta["benchmarks"].values()))["parts"]
    whole = digest({"dataset": parts["dataset"], "scorer": ["exact", {}], "arms": spec_arms})
    return whole, digest(spec_arms)


def _as_recorded_before(results: Path, url: str) -> None:
    """Rewrite the meta line as the plugin wrote it when base_url was part of the fingerprint."""
    lines = results.read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    arms = {a: {"provider": "openai", "model": f"m-{a}", "base_url": url} for a in ("a", "b")}
    whole, arms_digest = _old_fingerprint(meta, arms)
    for info in meta["benchmarks"].values():
        info["fingerprint"] = whole
        info["parts"] = {k: v for k, v in info["parts"].items() if not k.startswith("arm/")} | {
            "arms": arms_digest
        }
    meta["fingerprint"] = "older"
    results.write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))


def test_a_file_fingerprinted_with_its_endpoint_still_resumes(
    pytester: pytest.Pytester, sweep: Sweep, served: FakeOpenAI
) -> None:
    make_spec(pytester, openai_spec(3))
    assert sweep.run()[0].ret == 0
    sweep.out.write_text("".join(sweep.out.read_text().splitlines(keepends=True)[:-2]))
    _as_recorded_before(sweep.out, served.base_url)
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0, result.stderr.str()
    assert len(rows) == 6


def test_regrade_needs_no_provider_settings(
    pytester: pytest.Pytester,
    sweep: Sweep,
    served: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_spec(pytester, openai_spec(2))
    assert sweep.run()[0].ret == 0
    # a regrade calls nothing: where the server was is no concern of it
    monkeypatch.delenv("BENCH_URL")
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(["regrade", str(sweep.out), "-o", str(pytester.path / "regraded.jsonl")]) == 0, (
        capsys.readouterr().err
    )
    monkeypatch.setenv("BENCH_URL", "http://localhost:1/v1")  # another endpoint: the same arms
    assert main(["regrade", str(sweep.out), "-o", str(pytester.path / "moved.jsonl")]) == 0, (
        capsys.readouterr().err
    )
    # A file fingerprinted with its endpoint regrades too, given that endpoint
    # (its digest holds nothing else).
    _as_recorded_before(sweep.out, served.base_url)
    monkeypatch.setenv("BENCH_URL", served.base_url)
    assert main(["regrade", str(sweep.out), "-o", str(pytester.path / "again.jsonl")]) == 0, (
        capsys.readouterr().err
    )
    assert "could not be verified" not in capsys.readouterr().err


def test_merge_names_what_differs(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, sim_spec(2))
    assert sweep.run("-k", "q0")[0].ret == 0
    first = sweep.out.rename(pytester.path / "first.jsonl")
    make_spec(
        pytester,
        sim_spec(
            2, arms="  good: {provider: sim, accuracy: 0.5}\n  bad: {provider: sim, accuracy: 0.0}"
        ),
    )
    assert sweep.run("-k", "q1")[0].ret == 0
    capsys.readouterr()
    assert main(["merge", str(first), str(sweep.out), "-o", str(pytester.path / "both.jsonl")]) != 0
    assert "different specs (changed: arm 'good' (key 'accuracy'))" in capsys.readouterr().err


def test_changed_parts_in_words() -> None:
    old = {
        "dataset": "d",
        "scorer": "s",
        "arms": "x",
        "arm/a": "1",
        "arm/a/model": "m",
        "arm/a/provider": "p",
        "arm/b": "2",
        "arm/b/provider": "p",
    }
    new = {
        "dataset": "d",
        "scorer": "t",
        "arms": "y",
        "arm/a": "3",
        "arm/a/model": "n",
        "arm/a/provider": "p",
        "arm/a/seed": "1",
        "arm/c": "4",
        "arm/c/provider": "p",
    }
    assert changed_parts(old, new) == [
        "the scorer",
        "arm 'a' (keys 'model', 'seed')",
        "arm 'b' (gone)",
        "arm 'c' (new)",
    ]
    # an older file: no digest per arm
    assert changed_parts({"dataset": "d", "arms": "x"}, new) == ["the arms"]


def _arms_part(tmp_path: Path, arm: str) -> dict[str, str]:
    from pytest_echo_bench.datasets.registry import load_examples
    from pytest_echo_bench.engine.fingerprint import fingerprint_parts
    from pytest_echo_bench.spec.load import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(sim_spec(2, arms=arm))
    spec = load_spec(path)
    return fingerprint_parts(spec, load_examples(spec))


AZURE = "    azure: {{endpoint: 'https://{}.openai.azure.com', deployment: {}, api_version: v1}}\n"


@pytest.mark.parametrize(("before", "after", "same"), [
    (AZURE.format("a", "d"), AZURE.format("b", "d"), True),
    (AZURE.format("a", "d"), AZURE.format("a", "e"), False),
])
def test_an_azure_resource_moved_keeps_the_arm_a_deployment_changed_does_not(
    tmp_path: Path, before: str, after: str, same: bool
) -> None:
    def arm(azure: str) -> str:
        return f"  a:\n    provider: openai\n    model: gpt-4o\n{azure}"

    assert (_arms_part(tmp_path, arm(before)) == _arms_part(tmp_path, arm(after))) is same


def test_a_bedrock_arm_moved_to_another_region_or_profile_keeps_its_fingerprint(
    tmp_path: Path,
) -> None:
    def arm(region: str, profile: str, model: str = "m1") -> str:
        return (f"  a:\n    provider: bedrock\n    model: {model}\n    region: {region}\n"
                f"    profile: {profile}\n")

    here = _arms_part(tmp_path, arm("us-east-1", "research"))
    assert here == _arms_part(tmp_path, arm("eu-west-1", "other"))
    assert here != _arms_part(tmp_path, arm("us-east-1", "research", model="m2"))
