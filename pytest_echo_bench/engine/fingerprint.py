"""Fingerprints: a digest of everything that determines a spec's answers, and of each of its parts.

Operational settings (latency, injected faults, concurrency, retries, timeouts, the name of
the key variable) and the endpoint (``base_url``, the proxy, CA files, the HTTP client) are left
out: changing them must not make a results file unresumable. The endpoint was part of the
fingerprint before; a file recorded then still resumes (``accepted``: both formulas).

Each part is a digest of its own, recorded in the meta line (``parts``), so a mismatch says what
changed: the dataset, the scorer, an arm (``arm/NAME``) or one key of it (``arm/NAME/KEY``). A
new key an arm's answers depend on needs nothing here: every key not listed as operational or
endpoint is part of the arm's descriptor, and so of its digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_echo_bench.spec.load import ENDPOINT_KEYS as ENDPOINT

if TYPE_CHECKING:
    from pytest_echo_bench.datasets.example import Example
    from pytest_echo_bench.spec.load import ArmSpec, Spec

_OPERATIONAL = frozenset({"latency_s", "faults", "api_key_env", "concurrency"})
# ENDPOINT: where the calls go and how, not what they ask: moving a server from 127.0.0.1 to
# localhost, or behind a proxy, must not block a resume (nor a regrade, which calls nothing).
# a part's name prefix: ``arm/NAME`` and ``arm/NAME/KEY`` ('/' is never in an arm's name)
ARM = "arm/"


def spec_fingerprint(spec: Spec, examples: list[Example]) -> str:
    """A digest of everything that determines the spec's answers."""
    return _whole(dataset_digest(examples), spec, _OPERATIONAL | ENDPOINT)


def accepted(spec: Spec, dataset: str) -> set[str]:
    """The fingerprints a file recorded for this spec may hold: today's, and the one computed
    before the endpoint left it (files written then resume as they are). ``dataset`` is the
    dataset's digest (``parts["dataset"]``)."""
    return {_whole(dataset, spec, _OPERATIONAL | ENDPOINT), _whole(dataset, spec, _OPERATIONAL)}


def fingerprint_parts(spec: Spec, examples: list[Example]) -> dict[str, str]:
    """A digest of each part a spec's answers depend on: its dataset, its scorer, its arms (all
    of them, each one, and each key of each one).

    Recorded per benchmark in the meta line beside the fingerprint, so a tool that changes one
    part (regrade: the scorer) can check that the others still match the file, and a mismatch
    can name what changed (``changed_parts``).
    """
    descriptors = {name: arm_descriptor(spec, name) for name in sorted(spec.arms)}
    parts = {
        "dataset": dataset_digest(examples),
        "scorer": _digest(scorer_descriptor(spec)),
        "arms": _digest(descriptors),
    }
    for name, descriptor in descriptors.items():
        parts[f"{ARM}{name}"] = _digest(descriptor)
        parts.update(
            {f"{ARM}{name}/{key}": _digest(value) for key, value in sorted(descriptor.items())}
        )
    return parts


def legacy_arms_digest(spec: Spec) -> str:
    """The ``arms`` part as files recorded it before the endpoint left the fingerprint."""
    return _digest({name: cache_descriptor(spec, name) for name in sorted(spec.arms)})


def changed_parts(old: Mapping[str, Any], new: Mapping[str, str]) -> list[str]:
    """What differs between two recorded ``parts``, in words: "the dataset", "the scorer",
    "arm 'a' (key 'model')", "arm 'c' (new)", "arm 'b' (gone)"; the arms as a whole when the
    file records no digest per arm (it was written before they were recorded)."""
    said = [
        f"the {part}"
        for part in ("dataset", "scorer")
        if part in old and old[part] != new.get(part)
    ]
    arms_old, arms_new = _arms_of(old), _arms_of(new)
    if not arms_old:  # an older file: one digest of all arms
        return said + (["the arms"] if "arms" in old and old["arms"] != new.get("arms") else [])
    for name in sorted(arms_old.keys() | arms_new.keys()):
        if name not in arms_new:
            said.append(f"arm {name!r} (gone)")
        elif name not in arms_old:
            said.append(f"arm {name!r} (new)")
        elif arms_old[name] != arms_new[name]:
            keys = _keys_of(old, name), _keys_of(new, name)
            which = sorted(
                k for k in keys[0].keys() | keys[1].keys() if keys[0].get(k) != keys[1].get(k)
            )
            said.append(
                f"arm {name!r} ({'key' if len(which) == 1 else 'keys'} "
                f"{', '.join(map(repr, which))})"
                if which
                else f"arm {name!r}"
            )
    return said


def _arms_of(parts: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key[len(ARM) :]: value
        for key, value in parts.items()
        if key.startswith(ARM) and "/" not in key[len(ARM) :]
    }


def _keys_of(parts: Mapping[str, Any], arm: str) -> dict[str, Any]:
    prefix = f"{ARM}{arm}/"
    return {key[len(prefix):]: value for key, value in parts.items() if key.startswith(prefix)}


def dataset_digest(examples: list[Example]) -> str:
    """The dataset's part: every item's id, prompt and target (an
    export checks its prompts by it)."""
    return _digest([[e.id, e.input, e.target] for e in examples])


def item_digest(example: Example) -> str:
    """What one item asked, as its rows record it (``item_sha256``): the sha256 of the canonical
    JSON (sorted keys, ASCII) of its id, input, target, subtask and metadata. Two runs that give
    an item the same digest asked the same thing of it; a value JSON cannot hold (a loader's own
    object) counts by its ``str``."""
    blob = json.dumps({"id": example.id, "input": example.input, "target": example.target,
                       "subtask": example.subtask, "metadata": dict(example.metadata)},
                      sort_keys=True, ensure_ascii=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def arm_descriptor(
    spec: Spec, name: str, left_out: frozenset[str] = _OPERATIONAL | ENDPOINT
) -> dict[str, Any]:
    """What an arm's answers depend on: its provider and options, not its name nor its endpoint."""
    return _descriptor(spec, spec.arms[name], left_out)


def _descriptor(spec: Spec, arm: ArmSpec, left_out: frozenset[str]) -> dict[str, Any]:
    options = {k: v for k, v in arm.options.items() if k not in left_out}
    if ENDPOINT <= left_out:
        options = _without_place(arm.provider, options)
    if arm.provider == "python" and isinstance(options.get("function"), str):
        from pytest_echo_bench.providers.python_arm import resolve, source_digest

        fn = resolve(options["function"])
        options["source"] = source_digest(fn) if fn else None
    # absent without one: the fingerprints of specs without prompts stay as they were
    if arm.prompt is not None:
        from pytest_echo_bench.datasets.prompts import prompt_settings

        options["prompt"] = prompt_settings(spec, arm.name)
    return {"provider": arm.provider, **options}


def _without_place(provider: str, options: dict[str, Any]) -> dict[str, Any]:
    """An arm's options without where its provider is reached: an Azure resource's ``endpoint``
    (its ``deployment`` stays: it names the model), a Bedrock arm's ``region`` and ``profile``.
    A deployment moved to another resource or region answers the same requests."""
    azure = options.get("azure")
    if isinstance(azure, dict) and "endpoint" in azure:
        options = {**options, "azure": {k: v for k, v in azure.items() if k != "endpoint"}}
    if provider == "bedrock":
        options = {k: v for k, v in options.items() if k not in ("region", "profile")}
    return options


def scorer_descriptor(spec: Spec) -> list[Any]:
    """What grades the answers: the scorer and its options, and (only when the spec declares any,
    so older fingerprints stay) its judges without their endpoints and the text of a
    ``template_file``: a rubric or judge change is a scorer change, never an arm change."""
    template = spec.scorer_options.get("template_file")
    options = spec.scorer_options
    if isinstance(template, str):  # its text, wherever the spec's folder is
        options = {**options, "template_file": _file_digest(Path(template))}
    described: list[Any] = [spec.scorer, options]
    if spec.judges:
        left_out = _OPERATIONAL | ENDPOINT
        described.append({name: {k: v for k, v in sorted(conf.items()) if k not in left_out}
                          for name, conf in sorted(spec.judges.items())})
    return described


def _file_digest(path: Path) -> str | None:
    """The digest of a file the scorer reads (None when it cannot be read: the scorer's check
    says why before any call)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def cache_descriptor(spec: Spec, name: str) -> dict[str, Any]:
    """What the response cache keys an arm's calls on: its descriptor with the endpoint kept in, as
    before (a cache filled then still answers; two servers behind one
    model name never share answers)."""
    return call_descriptor(spec, spec.arms[name])


def call_descriptor(spec: Spec, arm: ArmSpec) -> dict[str, Any]:
    """``cache_descriptor`` of ``arm``, an arm of ``spec`` or a judge its scorer asks."""
    return _descriptor(spec, arm, _OPERATIONAL)


def _whole(dataset: str, spec: Spec, left_out: frozenset[str]) -> str:
    """The fingerprint (the formula every file has used, with
    ``left_out`` the arm keys it leaves out)."""
    return _digest({
        "dataset": dataset,
        "scorer": scorer_descriptor(spec),
        "arms": {name: arm_descriptor(spec, name, left_out) for name in sorted(spec.arms)},
    })


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def combine(fingerprints: dict[str, str]) -> str:
    return _digest(sorted(fingerprints.items()))
