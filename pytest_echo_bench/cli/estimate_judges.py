"""The judges' part of ``echo-bench estimate``: each judge's calls and cost for the items selected
(``budget.judge_estimate``), the judge calls the response cache answers, and how the text and
JSON outputs show them.

A judge's prompt holds the answer under judgement, so the cache can answer a judge's call only when
it holds the answer too: for ``model_graded`` (whose template the spec gives) the answer the cache
holds for an item's arm is rendered into the judge's prompt exactly as the scorer renders it, and
the judge's own cache entry looked up. A judge call of any other scorer counts as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_echo_bench.budget.estimate import Plans, Seen, arm_paths, finite, own_prompts
from pytest_echo_bench.budget.judge_estimate import JudgeCache, JudgeEstimate, estimate_judges
from pytest_echo_bench.budget.judged import Panel, panel
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.prompts import Prompter
from pytest_echo_bench.engine.declared import declared
from pytest_echo_bench.engine.fingerprint import cache_descriptor, call_descriptor
from pytest_echo_bench.providers import provider_info
from pytest_echo_bench.scoring.model_graded import render
from pytest_echo_bench.scoring.registry import takes_judges
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.store.cache import cache_key, peek, peek_texts

Item = tuple[Example, str, int]  # (example, arm, epoch)
MODEL_GRADED = "model_graded"  # the scorer whose judge prompts the estimate can render


def spec_judges(spec: Spec, items: list[Item], cache: Path | None, seen: Seen,
                prompters: Mapping[str, Prompter] | None = None) -> list[JudgeEstimate]:
    """Each judge ``spec``'s scorer asks: its estimate over ``items``, the response ``cache``
    asked (the usage of the judges' replies it holds joins ``seen``)."""
    plan = panel(spec, declared(spec)) if takes_judges(spec.scorer) else None
    check = judge_cache(spec, plan, items, cache, seen, prompters)
    return estimate_judges(spec, plan, items, seen, check)


def judge_cache(spec: Spec, plan: Panel | None, items: list[Item], path: Path | None, seen: Seen,
                prompters: Mapping[str, Prompter] | None = None) -> JudgeCache | None:
    """Whether the cache at ``path`` answers a judge's call: each answer it holds rendered into
    the judge prompts it makes, every key looked up once (None: nothing to look up)."""
    if (path is None or not path.is_file() or plan is None or plan.template is None
            or spec.scorer != MODEL_GRADED):
        return None
    wanted = _judge_keys(spec, plan, items, _cached_answers(spec, items, path, prompters))
    held = peek(path, list(wanted))
    for key, usage in held.items():
        tokens = (usage or {}).get("completion_tokens")
        if tokens is not None:
            seen.add_completion(wanted[key][0], tokens)
    answered = {wanted[key] for key in held}
    return lambda name, example, arm, epoch: (name, example.id, arm, epoch) in answered


Asked = tuple[str, str, str, int]  # a judge call: (judge, task id, arm, epoch)


def _judge_keys(spec: Spec, plan: Panel, items: list[Item],
                answers: Mapping[tuple[str, str, int], str]) -> dict[str, Asked]:
    """Each judge call's cache key -> (judge, task id, arm, epoch), for the items whose answer
    the cache holds."""
    assert plan.template is not None  # only a template the spec gives renders here
    wanted: dict[str, Asked] = {}
    for example, arm, epoch in items:
        answer = answers.get((example.id, arm, epoch))
        if answer is None:
            continue
        prompt = render(plan.template, example, answer)
        for name in plan.calls:
            key = _judge_key(spec, plan, name, prompt, epoch)
            if key is not None:
                wanted[key] = (name, example.id, arm, epoch)
    return wanted


def _cached_answers(spec: Spec, items: list[Item], path: Path,
                    prompters: Mapping[str, Prompter] | None) -> dict[tuple[str, str, int], str]:
    """(task id, arm, epoch) -> the answer the cache holds for an item whose arm makes one call
    (a routing arm's answer depends on which of its calls answers: not looked up)."""
    wanted: dict[str, tuple[str, str, int]] = {}
    plans: Plans = {}
    descriptors: dict[str, dict[str, Any]] = {}
    for example, arm, epoch in items:
        calls = arm_paths(spec, arm, example.input, example.input, plans,
                          own_prompts(prompters, example)).worst
        call = calls[0]
        if len(calls) != 1 or call.prompt is None or not provider_info(
                spec.arms[arm].provider).cacheable:
            continue
        if arm not in descriptors:
            descriptors[arm] = cache_descriptor(spec, arm)
        wanted[cache_key(descriptors[arm], call.prompt, call.sample, epoch)] = (
            example.id, arm, epoch)
    return {wanted[key]: text for key, text in peek_texts(path, list(wanted)).items()}


def _judge_key(spec: Spec, plan: Panel, name: str, prompt: str, epoch: int) -> str | None:
    """The cache key of judge ``name``'s first ask of ``prompt``, as the run's judge call keys
    it (``engine.arms``: the system text apart, or before the prompt when its provider sends
    none apart)."""
    conf = plan.judges[name]
    info = provider_info(conf.provider)
    if not info.cacheable:
        return None
    system = plan.system or None
    if system and not info.system:
        prompt, system = f"{system}\n\n{prompt}", None
    descriptor = call_descriptor(spec, conf)
    if system is not None:
        descriptor = {**descriptor, "request_system": system}
    return cache_key(descriptor, prompt, 0, epoch)


def judge_json(est: JudgeEstimate) -> dict[str, Any]:
    """One judge's figures, as ``--format json`` prints them."""
    unknown = est.calls and not est.priced
    return {
        "items": est.items,
        "calls": est.calls,
        "cached_calls": est.cached,
        "prompt_tokens": {"low": est.prompt_low, "high": est.prompt_high},
        "completion_tokens": {"low": round(est.completion_low), "high": est.completion_high},
        "cost_usd": {
            "low": None if unknown else finite(est.cost_low),
            "high": None if unknown else finite(est.cost_high),
        },
        "priced": est.priced,
    }


def judge_lines(judges: Mapping[str, Any], shown: Callable[[float | None], str]) -> list[str]:
    """One line per judge: the items it judges, its calls, those cached, prompt tokens and cost
    (``shown``: how an amount is written)."""
    if not judges:
        return []
    lines = [f"{'judge':<24} {'items':>7} {'calls':>13} {'cached':>7} {'prompt tok':>11} "
             f"{'cost low':>10} {'cost high':>10}"]
    for label, judge in judges.items():
        tokens = judge["prompt_tokens"]
        most = "?" if tokens["high"] is None else tokens["high"]
        prompt = f"{tokens['low']}-{most}"
        cost = judge["cost_usd"]
        lines.append(f"{label:<24} {judge['items']:>7} {judge['calls']:>13} "
                     f"{judge.get('cached_calls', 0):>7} {prompt:>11} "
                     f"{shown(cost['low']):>10} {shown(cost['high']):>10}")
    return lines

