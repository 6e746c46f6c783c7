"""Prompts as data: arms that are prompts on one model, their few-shot examples, and what they
change (the rows, the response cache's keys, the fingerprint a resume checks)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from openai_server import FakeOpenAI

from conftest import Sweep, make_spec, sim_spec

STEPS = "Q: {input}\\nThink step by step, then answer."


pytestmark = pytest.mark.usefixtures("api_key")


def openai_arm(server: FakeOpenAI, name: str, extra: str = "") -> str:
    return (f"  {name}:\n    provider: openai\n    model: m\n    base_url: {server.base_url}\n"
            f"    api_key_env: TEST_OPENAI_KEY\n{extra}")


def sent(server: FakeOpenAI) -> list[str]:
    """The user message of every request the server was sent, in order."""
    return [r["body"]["messages"][-1]["content"] for r in server.requests]


def cache_keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {key for (key,) in db.execute("SELECT key FROM responses")}


def prompts_spec(server: FakeOpenAI, template: str = STEPS, n: int = 3) -> str:
    return sim_spec(
        n,
        arms=openai_arm(server, "plain")
        + openai_arm(server, "steps", f'    prompt: "{template}"\n'),
    )


def test_two_prompts_on_one_model_are_two_arms(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    """Each arm is sent its own prompt; the answers, rows and cache entries are the arm's."""
    openai_server.answer = lambda prompt: "4" if "step by step" in prompt else "5"
    make_spec(pytester, prompts_spec(openai_server))
    cache = pytester.path / "c.sqlite"
    result, meta, rows = sweep.run("--bench-cache", str(cache))
    assert result.ret == 0  # wrong answers are rows (gates judge them)
    assert sorted(sent(openai_server)) == sorted(
        [f"2+2=? ({i})" for i in range(3)]
        + [f"Q: 2+2=? ({i})\nThink step by step, then answer." for i in range(3)]
    )
    passed = {(r["arm"], r["task_id"]): r["passed"] for r in rows}
    assert passed == {
        **{("plain", f"q{i}"): False for i in range(3)},
        **{("steps", f"q{i}"): True for i in range(3)},
    }
    # one entry per arm and item: the rendered prompt is in the key
    assert len(cache_keys(cache)) == 6

    # The same spec again: every answer comes from the cache.
    openai_server.requests.clear()
    result, _, rows = sweep.run(
        "--bench-cache", str(cache), "--bench-out", str(pytester.path / "again.jsonl")
    )
    assert sent(openai_server) == [] and len(cache_keys(cache)) == 6

    # A changed template is a different call: its arm is asked again, the
    # other still answers from the cache.
    make_spec(
        pytester,
        prompts_spec(openai_server, "Question: {input}\\nThink step by step, then answer."),
    )
    result, _, _ = sweep.run(
        "--bench-cache", str(cache), "--bench-out", str(pytester.path / "changed.jsonl")
    )
    assert sorted(sent(openai_server)) == [
        f"Question: 2+2=? ({i})\nThink step by step, then answer." for i in range(3)
    ]
    assert len(cache_keys(cache)) == 9


def test_a_changed_template_changes_the_fingerprint_and_resume_refuses_it(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    def spec(template: str) -> str:
        return sim_spec(
            2,
            arms="  a: {provider: sim, accuracy: 1.0}\n  b: {provider: sim, accuracy: 1.0, "
            f'prompt: "{template}"}}',
        )

    make_spec(pytester, spec("Q: {input}"))
    first, meta, _ = sweep.run()
    assert first.ret == 0 and meta is not None
    make_spec(
        pytester,
        sim_spec(
            2, arms="  a: {provider: sim, accuracy: 1.0}\n  b: {provider: sim, accuracy: 1.0}"
        ),
    )
    sweep.run("--bench-out", str(pytester.path / "without.jsonl"))
    make_spec(pytester, spec("Q: {input}"))
    sweep.run("--bench-out", str(pytester.path / "same.jsonl"))
    without = json.loads((pytester.path / "without.jsonl").read_text().splitlines()[0])
    same = json.loads((pytester.path / "same.jsonl").read_text().splitlines()[0])
    assert same["fingerprint"] == meta["fingerprint"] != without["fingerprint"]

    make_spec(pytester, spec("Question: {input}"))
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*was recorded with fingerprint*"])
    assert len(rows) == 4  # nothing was added

    make_spec(pytester, spec("Q: {input}"))  # the template it was made with: it resumes
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0 and len(rows) == 4
    result.stdout.fnmatch_lines(["*resuming*: 4 recorded, 0 to run"])


def test_fewshot_from_a_file(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    shots = [
        {"id": f"s{i}", "input": f"1+{i}=?", "target": str(1 + i), "hint": f"h{i}"}
        for i in range(3)
    ]
    (pytester.path / "shots").mkdir()
    (pytester.path / "shots" / "ex.jsonl").write_text("".join(json.dumps(s) + "\n" for s in shots))
    fewshot = (
        '    fewshot: {path: shots/ex.jsonl, n: 2, template: "Q: {input} ({hint})\\nA: '
        '{target}", separator: "\\n--\\n"}\n'
    )
    make_spec(
        pytester,
        sim_spec(
            2, arms=openai_arm(openai_server, "shots", '    prompt: "Q: {input}\\nA:"\n' + fewshot)
        ),
    )
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 2
    assert sorted(sent(openai_server)) == [
        f"Q: 1+0=? (h0)\nA: 1\n--\nQ: 1+1=? (h1)\nA: 2\n--\nQ: 2+2=? ({i})\nA:" for i in range(2)
    ]


def test_fewshot_from_the_dataset_never_shows_the_item_itself(
    pytester: pytest.Pytester, sweep: Sweep, openai_server: FakeOpenAI
) -> None:
    arms = openai_arm(
        openai_server,
        "shots",
        '    fewshot: {from_dataset: 2, seed: 7, template: "{input} => {target}"}\n',
    )
    make_spec(pytester, sim_spec(6, arms=arms))
    sweep.run("--bench-cache", "off")
    first = sent(openai_server)
    assert len(first) == 6
    for prompt in first:
        *examples, own = prompt.split("\n\n")
        assert len(examples) == 2 and len(set(examples)) == 2
        assert all(e.startswith("2+2=? (") and e.endswith(" => 4") for e in examples)
        assert own.startswith("2+2=? (") and not any(e.startswith(own + " ") for e in examples)
    assert len({p.split("\n\n")[0] for p in first}) > 1  # drawn per item, not one set for all

    # Chosen by the seed and the item: the same prompts on another run,
    # in another order, under xdist.
    openai_server.requests.clear()
    sweep.run("--bench-cache", "off", "--bench-out", str(pytester.path / "again.jsonl"), "-n", "2")
    assert sorted(sent(openai_server)) == sorted(first)


def test_a_routing_arm_calls_each_arm_with_its_own_prompt(pytester: pytest.Pytester, sweep: Sweep,
                                                         openai_server: FakeOpenAI) -> None:
    arms = (
        openai_arm(openai_server, "steps", f'    prompt: "{STEPS}"\n')
        + openai_arm(openai_server, "plain")
        + "  route: {provider: cascade, cheap: steps, n: 2, strong: plain}\n"
    )
    make_spec(pytester, sim_spec(1, arms=arms))
    result, _, rows = sweep.run("--bench-cache", "off", "-k", "route")
    assert len(rows) == 1 and rows[0]["arm"] == "route"
    # they agreed: no escalation
    assert sent(openai_server) == ["Q: 2+2=? (0)\nThink step by step, then answer."] * 2


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        (
            'prompt: "Q: {input.__class__}"',
            "*[[]arms.a.prompt[]]: the prompt template 'Q: {input.__class__}': "
            "{input.__class__} must be a plain field name*",
        ),
        ('prompt: "{input!r}"', "*[[]arms.a.prompt[]]: *{input!r} must be a plain field name*"),
        (
            'prompt: "{input:>400}"',
            "*[[]arms.a.prompt[]]: *{input:>400} must be a plain field name*",
        ),
        ('prompt: "{}"', "*[[]arms.a.prompt[]]: *{} must be a plain field name*"),
        (
            'prompt: "Q: {input"',
            "*[[]arms.a.prompt[]]: the prompt template 'Q: {input': expected '}'*",
        ),
        (
            'prompt: "Q: {question}"',
            "*demo.yaml:11 [[]arms.a.prompt[]]: item 'q0': the prompt names {question}, "
            "which the item lacks (it has id, input)*",
        ),
        (
            'prompt: "{input} {target}"',
            "*[[]arms.a.prompt[]]: the prompt names {target}, which would show the model the "
            "answer*",
        ),
        ("prompt: [a, b]", "*[[]arms.a.prompt[]]: prompt must be a template text*"),
        ('prompt: ""', "*[[]arms.a.prompt[]]: prompt must be a template text*"),
        (
            "prompt: {template: x, shots: 2}",
            "*demo.yaml:11 [[]arms.a.prompt.shots[]]: unknown prompt key 'shots'; known: "
            "fewshot, template*",
        ),
        (
            "fewshot: {from_dataset: 1, nn: 2}",
            "*demo.yaml:11 [[]arms.a.fewshot.nn[]]: unknown fewshot key 'nn'; known: *",
        ),
        ("fewshot: {n: 2}", "*[[]arms.a.fewshot[]]: fewshot needs one of path*"),
        (
            "fewshot: {from_dataset: 2}",
            "*[[]arms.a.fewshot.from_dataset[]]: from_dataset: 2 needs more items than that*",
        ),
        (
            "fewshot: {from_dataset: 0}",
            "*[[]arms.a.fewshot.from_dataset[]]: must be a whole number from 1*",
        ),
        (
            'fewshot: {from_dataset: 1, template: "{input} {answer}"}',
            "*item 'q0', as an example: fewshot.template names {answer}*",
        ),
        (
            "fewshot: {path: nowhere.jsonl}",
            "*[[]arms.a.fewshot.path[]]: fewshot file: dataset not found: *nowhere.jsonl*",
        ),
    ],
    ids=[
        "attribute",
        "conversion",
        "format-spec",
        "positional",
        "brace",
        "missing-field",
        "target",
        "not-text",
        "empty",
        "prompt-key",
        "fewshot-key",
        "no-source",
        "too-few-items",
        "zero",
        "example-field",
        "missing-file",
    ],
)
def test_a_bad_prompt_is_refused_naming_the_place(
    pytester: pytest.Pytester, sweep: Sweep, arm: str, expected: str
) -> None:
    make_spec(pytester, sim_spec(2, arms=f"  a:\n    provider: sim\n    {arm}"))
    result, _, rows = sweep.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*echo-bench: invalid benchmark spec: *" + expected.lstrip("*")])
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    assert rows == []


def test_a_routing_or_reference_arm_takes_no_prompt(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = (
        "  a: {provider: sim}\n  b: {provider: sim}\n  r: {provider: cascade, cheap: a, strong: "
        'b, prompt: "Q: {input}"}'
    )
    make_spec(
        pytester, sim_spec(2, arms="  ref: {provider: reference, fewshot: {from_dataset: 1}}")
    )
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(
        [
            "*[[]arms.ref.fewshot[]]: a reference arm answers with the target: it takes no "
            "prompt: or fewshot:"
        ]
    )
    assert rows == []
    make_spec(pytester, sim_spec(2, arms=arms))
    result, _, rows = sweep.run("--bench-out", str(pytester.path / "routing.jsonl"))
    result.stdout.fnmatch_lines(
        [
            "*[[]arms.r.prompt[]]: a cascade arm sends none of its own (each arm it calls is "
            "sent its own "
            "prompt): it takes no prompt: or fewshot:"
        ]
    )
    assert rows == []


def test_a_command_arms_prompt_delivery_is_not_a_template(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    """``prompt: arg`` keeps its meaning for a command arm (how the
    program is handed the prompt)."""
    arms = (
        "  echo:\n    provider: command\n    argv: [python, -c, 'import sys; "
        "print(sys.argv[1])', '{prompt}']\n"
        "    prompt: arg\n    fewshot: {from_dataset: 1}\n"
    )
    make_spec(pytester, sim_spec(2, arms=arms))
    result, _, rows = sweep.run("--bench-cache", "off")
    assert len(rows) == 2, result.stdout.str()
    for row in rows:
        # one example, then the item: handed over as the argument
        assert row["output"].count("2+2=?") == 2


def test_the_estimate_counts_each_arms_own_prompt(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """``echo-bench estimate`` counts the prompt the run sends: the
    template and examples included."""
    from pytest_echo_bench.cli.main import main

    long = "x" * 400
    arms = ("  plain: {provider: sim}\n"
            f'  long: {{provider: sim, prompt: "{long} {{input}}"}}\n'
            "  shots: {provider: sim, fewshot: {from_dataset: 2}}\n"
            "  route: {provider: cascade, cheap: long, n: 1, strong: plain}\n")
    spec = make_spec(pytester, sim_spec(3, arms=arms))
    capsys.readouterr()
    assert main(["estimate", str(spec), "--format", "json", "--cache", "off"]) == 0
    tokens = {
        name: arm["prompt_tokens"]
        for name, arm in json.loads(capsys.readouterr().out)["arms"].items()
    }
    item = -(-len("2+2=? (0)") // 4)  # ceil(characters / 4) per prompt
    assert tokens["plain"] == 3 * item
    assert tokens["long"] == 3 * -(-len(f"{long} 2+2=? (0)") // 4)
    assert tokens["shots"] == 3 * -(-len("2+2=? (0)\n4\n\n2+2=? (1)\n4\n\n2+2=? (2)") // 4)
    # its cheap arm is asked with that arm's own prompt
    assert tokens["route"] == tokens["long"] + tokens["plain"]


def test_an_inspect_export_attaches_what_each_arm_was_sent(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_echo_bench.cli.main import main

    make_spec(
        pytester,
        sim_spec(
            2, arms='  plain: {provider: sim}\n  steps: {provider: sim, prompt: "Q: {input}\\nA:"}'
        ),
    )
    sweep.run()
    out = pytester.path / "logs"
    assert main(["export", str(sweep.out), "-o", str(out)]) == 0
    inputs = sorted(
        sorted(s["input"] for s in json.loads(path.read_text())["samples"])
        for path in out.iterdir()
    )
    # one log per arm
    assert inputs == [["2+2=? (0)", "2+2=? (1)"], ["Q: 2+2=? (0)\nA:", "Q: 2+2=? (1)\nA:"]]
