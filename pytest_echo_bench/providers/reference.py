"""Reference: answer with the dataset's own reference, a self-test of a loader and its scorer."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    check_options,
    option,
)
from pytest_echo_bench.spec.load import ArmSpec, Spec

_KNOWN = {"template"}


@dataclass(frozen=True)
class ReferenceProvider(BaseProvider):

    instant = True  # the dataset's own answer
    template: str

    def complete(self, request: Request) -> Completion:
        ex = request.example
        # Code benchmarks carry a canonical solution; the target there is a test, not an answer.
        solution = ex.metadata.get("canonical_solution")
        text = (
            solution if isinstance(solution, str) else self.template.replace("{target}", ex.target)
        )
        return Completion(text, usage=None, sub_calls=0, extra={"reference": True})


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> ReferenceProvider:
    check_options(arm, spec, "reference", _KNOWN)
    template = option(arm, "template", str, "{target}", spec)
    if "{target}" not in template:
        raise spec.error("template must contain {target}", "arms", arm.name, "template")
    return ReferenceProvider(template)


PROVIDER = ProviderInfo(build, no_prompt="answers with the target")
