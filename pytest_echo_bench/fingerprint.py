"""Fingerprints: a digest of everything that determines a spec's answers.

Operational settings (latency, injected faults, concurrency, retries, timeouts, the name of
the key variable) are left out: changing them must not make a results file unresumable.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .datasets import Example
from .spec import Spec

_OPERATIONAL = {"latency_s", "faults", "api_key_env", "concurrency"}


def spec_fingerprint(spec: Spec, examples: list[Example]) -> str:
    data = {
        "dataset": _digest([[e.id, e.input, e.target] for e in examples]),
        "scorer": [spec.scorer, spec.scorer_options],
        "arms": {name: _arm(spec, name) for name, arm in sorted(spec.arms.items())},
    }
    return _digest(data)


def _arm(spec: Spec, name: str) -> dict[str, Any]:
    arm = spec.arms[name]
    options = {k: v for k, v in arm.options.items() if k not in _OPERATIONAL}
    if arm.provider == "python" and isinstance(options.get("function"), str):
        from .arms import resolve, source_digest

        fn = resolve(options["function"])
        options["source"] = source_digest(fn) if fn else None
    return {"provider": arm.provider, **options}


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def combine(fingerprints: dict[str, str]) -> str:
    return _digest(sorted(fingerprints.items()))
