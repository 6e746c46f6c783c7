"""Batch clients of real ``openai`` and ``anthropic`` arms, built from a spec file as a run builds
them, pointed at ``batch_server``; and the requests they send."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.providers import provider_info
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.spec.load import load_spec


def provider(where: Path, kind: str, base_url: str, extra: str = "", client: str = "http") -> Any:
    """The arm ``gpt`` of provider ``kind`` (its key from ``TEST_OPENAI_KEY`` or
    ``TEST_ANTHROPIC_KEY``), as ``build`` makes it from a spec."""
    key = "TEST_OPENAI_KEY" if kind == "openai" else "TEST_ANTHROPIC_KEY"
    where.mkdir(parents=True, exist_ok=True)
    path = where / "batch.yaml"
    path.write_text(
        "benchmark: demo\ndataset:\n  loader: inline\n  items:\n"
        '    - {id: q0, input: "2+2", target: "4"}\nscorer: exact\ntimeout_s: 5\narms:\n'
        f"  gpt:\n    provider: {kind}\n    model: local-model\n    base_url: {base_url}\n"
        f"    api_key_env: {key}\n    client: {client}\n    temperature: 0\n{extra}",
        encoding="utf-8",
    )
    spec = load_spec(path)
    arm = spec.arms["gpt"]
    return provider_info(kind).build(arm, spec, lambda name, request: None)  # type: ignore


def requests(n: int, prefix: str = "c") -> list[tuple[str, Request]]:
    """``n`` requests keyed ``c0``, ``c1``...: prompt ``q<i>``."""
    return [
        (f"{prefix}{i}", Request(Example(f"t{i}", f"q{i}", "4"), "gpt", f"q{i}"))
        for i in range(n)
    ]
