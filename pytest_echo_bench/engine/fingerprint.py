"""Fingerprints: a digest of everything that determines a spec's answers.

Operational settings (latency, injected faults, concurrency, retries, timeouts, the name of
the key variable) are left out: changing them must not make a results file unresumable.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.spec.load import Spec

_OPERATIONAL = {"latency_s", "faults", "api_key_env", "concurrency"}


def spec_fingerprint(spec: Spec, examples: list[Example]) -> str:
    """A digest of everything that determines the spec's answers (the formula every file has used)."""
    data = {
        "dataset": dataset_digest(examples),
        "scorer": [spec.scorer, spec.scorer_options],
        "arms": {name: arm_descriptor(spec, name) for name in sorted(spec.arms)},
    }
    return _digest(data)


def fingerprint_parts(spec: Spec, examples: list[Example]) -> dict[str, str]:
    """A digest of each part a spec's answers depend on: its dataset, its scorer, its arms.

    Recorded per benchmark in the meta line beside the fingerprint, so a tool that changes one
    part (regrade: the scorer) can check that the others still match the file.
    """
    return {
        "dataset": dataset_digest(examples),
        "scorer": _digest([spec.scorer, spec.scorer_options]),
        "arms": _digest({name: arm_descriptor(spec, name) for name in sorted(spec.arms)}),
    }


def dataset_digest(examples: list[Example]) -> str:
    """The dataset's part: every item's id, prompt and target (an export checks its prompts by it)."""
    return _digest([[e.id, e.input, e.target] for e in examples])


def arm_descriptor(spec: Spec, name: str) -> dict[str, Any]:
    """What an arm's answers depend on: its provider and options, not its name."""
    arm = spec.arms[name]
    options = {k: v for k, v in arm.options.items() if k not in _OPERATIONAL}
    if arm.provider == "python" and isinstance(options.get("function"), str):
        from pytest_echo_bench.providers.python_arm import resolve, source_digest

        fn = resolve(options["function"])
        options["source"] = source_digest(fn) if fn else None
    if arm.prompt is not None:  # absent without one: the fingerprints of specs without prompts stay as they were
        from pytest_echo_bench.datasets.prompts import prompt_settings

        options["prompt"] = prompt_settings(spec, name)
    return {"provider": arm.provider, **options}


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def combine(fingerprints: dict[str, str]) -> str:
    return _digest(sorted(fingerprints.items()))
