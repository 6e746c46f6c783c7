"""MT-bench: FastChat's questions loaded, its answer and judgment files replayed, its judge prompts
rendered byte for byte, and GPT-4's recorded first-turn grades reproduced through a sweep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA, Sweep, make_spec, read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.registry import load_benchmark
from pytest_echo_bench.errors import PermanentError, SpecError
from pytest_echo_bench.providers.base import Request
from pytest_echo_bench.providers.replay_fastchat import FastChatAnswers, FastChatJudgments
from pytest_echo_bench.scoring.fastchat_prompts import PROMPTS, SINGLE_MATH_V1, SINGLE_V1
from pytest_echo_bench.scoring.judging import Reply
from pytest_echo_bench.scoring.judgment import REPLY_KEEP, prompt_digest
from pytest_echo_bench.scoring.verdict import Verdict
from pytest_echo_bench.suites import mt_bench

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "mt-bench"
DATA = SHARED_DATA / "mt-bench"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"FastChat's MT-bench files are not at {DATA}"
)
MODELS = ("mistral-orpo-capybara", "mistral-orpo-mix", "mistral-orpo-trl")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def loader_spec(path: Path | str, reference: Path | str | None = None, extra: str = "",
                scorer: str = "exact", arms: str = "  a: {provider: sim}\n") -> str:
    ref = f"  reference: {reference}\n" if reference is not None else ""
    return (f"benchmark: mt_bench\ndataset:\n  loader: mt_bench\n  path: {path}\n{ref}{extra}"
            f"scorer: {scorer}\narms:\n{arms}")


def load(tmp_path: Path, body: str) -> list[Example]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(body, encoding="utf-8")
    return load_benchmark(spec)[1]


# ---- the loader ------------------------------------------------------------------------------


def test_each_question_is_its_first_turn_with_its_category_and_reference(tmp_path: Path) -> None:
    examples = load(tmp_path, loader_spec(FIXTURE / "question.jsonl",
                                          FIXTURE / "reference_answer" / "gpt-4.jsonl"))
    by_id = {ex.id: ex for ex in examples}
    assert list(by_id) == [f"mt_bench/{q}" for q in (81, 91, 101, 111, 121)]
    assert by_id["mt_bench/111"] == Example(
        "mt_bench/111", "What is 17 * 3?", "", "math",
        {"question_id": 111, "category": "math", "reference": "17 * 3 = 51."})
    assert dict(by_id["mt_bench/81"].metadata) == {"question_id": 81, "category": "writing"}
    assert {ex.id for ex in examples if "reference" in ex.metadata} == {
        "mt_bench/101", "mt_bench/111", "mt_bench/121"}


def test_without_a_reference_file_no_item_has_a_reference(tmp_path: Path) -> None:
    examples = load(tmp_path, loader_spec(FIXTURE / "question.jsonl"))
    assert len(examples) == 5 and all("reference" not in ex.metadata for ex in examples)


def test_start_and_limit_apply_per_category(tmp_path: Path) -> None:
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(
        json.dumps({"question_id": i, "category": "ab"[i % 2], "turns": [f"q{i}"]}) + "\n"
        for i in range(10)), encoding="utf-8")
    examples = load(tmp_path, loader_spec(questions, extra="  start: 1\n  limit: 2\n"))
    assert [ex.id for ex in examples] == ["mt_bench/2", "mt_bench/4", "mt_bench/3", "mt_bench/5"]


@needs_data
def test_the_real_questions_and_references(tmp_path: Path) -> None:
    examples = load(tmp_path, loader_spec(DATA / "question.jsonl",
                                          DATA / "reference_answer" / "gpt-4.jsonl"))
    assert len(examples) == 80 and len({ex.subtask for ex in examples}) == 8
    referenced = {ex.subtask for ex in examples if "reference" in ex.metadata}
    assert referenced == {"math", "reasoning", "coding"}
    assert sum("reference" in ex.metadata for ex in examples) == 30


BAD_QUESTIONS = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a record must be a JSON object"),
    ('{"question_id": true, "category": "math", "turns": ["x"]}', "question_id must be"),
    ('{"question_id": 7, "turns": ["x"]}', "needs a category"),
    ('{"question_id": 7, "category": "math", "turns": "x"}', "needs turns"),
    ('{"question_id": 7, "category": "math", "turns": []}', "needs turns"),
    ('{"question_id": 81, "category": "math", "turns": ["again"]}', "question_id 81 again (first "
     "on line 1)"),
]


@pytest.mark.parametrize(("line", "why"), BAD_QUESTIONS)
def test_a_malformed_question_names_file_line_and_key(tmp_path: Path, line: str,
                                                      why: str) -> None:
    questions = tmp_path / "q.jsonl"
    good = (FIXTURE / "question.jsonl").read_text(encoding="utf-8").splitlines()[0]
    questions.write_text(f"{good}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(SpecError) as raised:
        load(tmp_path, loader_spec(questions))
    assert f"{questions}:3: " in str(raised.value) and why in str(raised.value)
    assert raised.value.key == "dataset.path" and raised.value.line == 4


@pytest.mark.parametrize(("line", "why"), [
    ('{"question_id": 111, "choices": []}', "needs choices[0].turns[0]"),
    ('{"question_id": 111, "choices": [{"turns": [3]}]}', "needs choices[0].turns[0]"),
    ('{"choices": [{"turns": ["x"]}]}', "question_id must be"),
    ("\xff", "not UTF-8"),
])
def test_a_malformed_reference_names_file_line_and_key(tmp_path: Path, line: str,
                                                       why: str) -> None:
    references = tmp_path / "ref.jsonl"
    references.write_bytes(b"\n" + line.encode("latin-1") + b"\n")
    with pytest.raises(SpecError) as raised:
        load(tmp_path, loader_spec(FIXTURE / "question.jsonl", references))
    assert f"{references}:2: " in str(raised.value) and why in str(raised.value)
    assert raised.value.key == "dataset.reference"


def test_a_missing_reference_file_or_an_unknown_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="reference answer file not found: .*absent.jsonl"):
        load(tmp_path, loader_spec(FIXTURE / "question.jsonl", "absent.jsonl"))
    with pytest.raises(SpecError, match="unknown key 'refrence' for loader mt_bench"):
        load(tmp_path, loader_spec(FIXTURE / "question.jsonl", extra="  refrence: x\n"))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=200))
def test_any_question_file_loads_or_is_refused_with_its_line(tmp_path_factory: Any,
                                                             data: bytes) -> None:
    folder = tmp_path_factory.mktemp("q")
    questions = folder / "q.jsonl"
    questions.write_bytes(data)
    try:
        examples = load(folder, loader_spec(questions))
    except SpecError as exc:
        assert str(questions) in str(exc)
    else:
        assert examples and all(ex.id.startswith("mt_bench/") for ex in examples)


# ---- the judge prompts -----------------------------------------------------------------------


@needs_data
def test_the_shipped_prompts_are_fastchats_byte_for_byte() -> None:
    recorded = {rec["name"]: rec for rec in lines(DATA / "judge_prompts.jsonl")}
    for name, prompt in PROMPTS.items():
        assert (prompt.system, prompt.template) == (recorded[name]["system_prompt"],
                                                    recorded[name]["prompt_template"])


def test_a_prompt_renders_answers_with_braces_as_they_are() -> None:
    rendered = SINGLE_V1.render(question="Q?", answer="{answer} {0} }{")
    assert rendered.endswith("[The Start of Assistant's Answer]\n{answer} {0} }{\n"
                             "[The End of Assistant's Answer]")


# ---- replay ----------------------------------------------------------------------------------


def arms_of(*models: str, root: Path = FIXTURE) -> str:
    return "".join(f"  {m}: {{provider: replay, path: {root}/model_answer/{m}.jsonl}}\n"
                   for m in models)


def test_an_answer_file_replays_the_first_turn_by_question_id(pytester: pytest.Pytester,
                                                              sweep: Sweep) -> None:
    make_spec(pytester, loader_spec(FIXTURE / "question.jsonl", arms=arms_of("tiny-a", "tiny-b")))
    _, _, rows = sweep.run()
    answers = {(m, str(rec["question_id"])): rec["choices"][0]["turns"][0]
               for m in ("tiny-a", "tiny-b")
               for rec in lines(FIXTURE / "model_answer" / f"{m}.jsonl")}
    assert {(r["arm"], r["task_id"].split("/")[1]): r["output"] for r in rows} == answers
    assert all(r["extra"]["replayed"] is True and r["sub_calls"] == 0 for r in rows)


def test_an_answer_file_without_the_question_is_an_error_row(pytester: pytest.Pytester,
                                                             sweep: Sweep) -> None:
    answers = pytester.path / "answers.jsonl"
    answers.write_text(json.dumps({"question_id": 81, "choices": [{"turns": ["hi"]}]}) + "\n")
    make_spec(pytester, loader_spec(FIXTURE / "question.jsonl",
                                    arms=f"  a: {{provider: replay, path: {answers}}}\n"))
    _, _, rows = sweep.run()
    errors = {r["task_id"]: r["detail"] for r in rows if r["status"] == "error"}
    assert len(rows) == 5 and "mt_bench/81" not in errors
    assert errors["mt_bench/91"] == f"error: no recorded answer for mt_bench/91: no question_id " \
                                    f"91 in {answers}"


def request(prompt: str, qid: int = 81) -> Request:
    example = Example(f"mt_bench/{qid}", "q", "", "writing", {"question_id": qid})
    return Request(example, "gpt-4", prompt)


def fixture_judge(tmp_path: Path) -> FastChatJudgments:
    # a copy: each path is read once per process, and a test that edits its file needs its own
    path = tmp_path / "judgments.jsonl"
    shutil.copy(FIXTURE / "model_judgment" / "gpt-4_single.jsonl", path)
    return FastChatJudgments(path)


def test_a_judgment_is_found_by_the_exact_prompt_and_names_its_judge(tmp_path: Path) -> None:
    judge = fixture_judge(tmp_path)
    record = lines(judge.path)[0]
    completion = judge.complete(request(record["user_prompt"]))
    assert completion.text == record["judgment"]
    assert completion.extra == {"replayed": True} and completion.sub_calls == 0
    assert completion.model == "gpt-4"


def test_a_prompt_one_character_off_names_where_it_leaves_the_closest(tmp_path: Path) -> None:
    judge = fixture_judge(tmp_path)
    prompt = lines(judge.path)[0]["user_prompt"]
    at = prompt.index("[Question]")
    with pytest.raises(PermanentError) as raised:
        judge.complete(request(prompt[:at] + "[question]" + prompt[at + 10:]))
    message = str(raised.value)
    assert f"for question 81 in {judge.path}: it leaves the closest recorded prompt (line 1) " \
           f"at character {at + 1}:" in message
    assert "\\n\\n[Question]\\nWrite" in message and "\\n\\n[question]\\nWrite" in message


def test_a_question_with_no_recorded_judgment_says_so(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="no recorded judgment for question 999 in "):
        fixture_judge(tmp_path).complete(request("anything", qid=999))


def test_one_prompt_judged_twice_differently_is_refused(tmp_path: Path) -> None:
    judge = fixture_judge(tmp_path)
    first = lines(judge.path)[0]
    with open(judge.path, "a", encoding="utf-8") as f:
        f.write(json.dumps({**first, "judgment": "Rating: [[1]]"}) + "\n")
    with pytest.raises(PermanentError, match=r"2 different judgments of this exact prompt "
                                             r"\(lines 1, 11\)"):
        judge.complete(request(first["user_prompt"]))


def test_a_malformed_judgment_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "judgments.jsonl"
    path.write_text('{"question_id": 1, "user_prompt": "p", "judgment": "j"}\n'
                    '{"question_id": 2, "user_prompt": "p"}\n', encoding="utf-8")
    for _ in range(2):  # read once: the second ask gets the same refusal
        with pytest.raises(PermanentError, match=f"{path}:2: a judgment needs user_prompt and "):
            FastChatJudgments(path).complete(request("p"))


RECORD_PARTS = st.sampled_from([
    b'{"question_id": 81, "choices": [{"turns": ["hi"]}]}', b'{"question_id": 81}',
    b'{"question_id": 81, "user_prompt": "p", "judgment": "Rating: [[5]]"}', b"\n", b"{",
    b'{"question_id": [], "choices": 1}', b"\xff", b"[]", b'{"user_prompt": 3, "judgment": 4}',
])


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(RECORD_PARTS, max_size=6).map(b"".join))
def test_any_fastchat_file_replays_or_fails_its_items_naming_the_file(tmp_path_factory: Any,
                                                                      data: bytes) -> None:
    path = tmp_path_factory.mktemp("fc") / "recording.jsonl"
    path.write_bytes(data)
    for provider in (FastChatAnswers(path), FastChatJudgments(path)):
        try:
            completion = provider.complete(request("p"))
        except PermanentError as exc:
            assert str(path) in str(exc)
        else:
            assert completion.text in ("hi", "Rating: [[5]]")


@needs_data
def test_every_recorded_first_turn_prompt_renders_from_the_shipped_templates(
        tmp_path: Path) -> None:
    examples = {ex.metadata["question_id"]: ex for ex in load(tmp_path, loader_spec(
        DATA / "question.jsonl", DATA / "reference_answer" / "gpt-4.jsonl"))}
    answers = {(m, rec["question_id"]): rec["choices"][0]["turns"][0] for m in MODELS
               for rec in lines(DATA / "model_answer" / f"{m}.jsonl")}
    judge = FastChatJudgments(DATA / "model_judgment" / "gpt-4_single.jsonl")
    found = 0
    for (_model, qid), answer in answers.items():
        ex = examples[qid]
        if "reference" in ex.metadata:
            prompt = SINGLE_MATH_V1.render(question=ex.input, answer=answer,
                                           ref_answer_1=ex.metadata["reference"])
        else:
            prompt = SINGLE_V1.render(question=ex.input, answer=answer)
        found += bool(judge.complete(request(prompt, qid)).text)
    assert found == 240


# ---- the scorer ------------------------------------------------------------------------------


class Recorded:
    """A judge that answers from a table: the scorer's side of the judge seam, and what it sent."""

    def __init__(self, replies: dict[str, str] | None = None, default: str = "Rating: [[5]]",
                 others: dict[str, str] | None = None) -> None:
        self.replies, self.default, self.others = replies or {}, default, others or {}
        self.asked: list[tuple[str, str, str | None]] = []

    def ask(self, name: str, prompt: str, system: str | None = None) -> Reply:
        self.asked.append((name, prompt, system))
        text = next((r for key, r in self.replies.items() if key in prompt), self.default)
        return Reply(text, model="judge-model")

    def answer_of(self, arm: str) -> str | None:
        return self.others.get(arm)


WRITING = Example("mt_bench/81", "Write a poem.", "", "writing",
                  {"question_id": 81, "category": "writing"})
MATH = Example("mt_bench/111", "What is 17 * 3?", "", "math",
               {"question_id": 111, "category": "math", "reference": "51"})


def grade(reply: str, output: str = "An answer.", **options: Any) -> Verdict:
    return mt_bench.score(output, WRITING, {"judge": "gpt-4", **options},
                          judges=Recorded(default=reply))


@pytest.mark.parametrize(("reply", "score"), [
    ("Good. Rating: [[8]]", 8.0),
    ("Rating: [[6.5]]", 6.5),
    ("Rating: [7]", 7.0),  # the fallback
    ("First [[3]], then [[9]].", 3.0),  # FastChat takes the first
    ("A [5] here, and [[8]] later.", 8.0),  # [[n]] anywhere before the fallback
    ("Rating: [[10]]\n", 10.0),
])
def test_fastchats_grade_rule(reply: str, score: float) -> None:
    verdict = grade(reply)
    assert verdict.score == score and verdict.passed == (score >= 8)
    assert verdict.status == ("correct" if score >= 8 else "wrong")
    assert [j.grade for j in verdict.judgments] == [score]


@pytest.mark.parametrize("reply", ["No rating at all.", "Rating: [[11]]", "Rating: [[0]]",
                                   "Rating: [[ten]]", ""])
def test_no_grade_is_unjudged_never_wrong_and_the_judgment_is_kept(reply: str) -> None:
    verdict = grade(reply)
    assert verdict.status == "unjudged" and verdict.score is None and not verdict.passed
    assert [j.reply for j in verdict.judgments] == [reply] and verdict.judgments[0].grade is None


def test_the_answers_own_grade_quoted_back_does_not_grade_it() -> None:
    output = "Here is my poem about the sea.\nRating: [[10]] from me, the poet."
    verdict = grade("The answer ends with 'Rating: [[10]] from me, the poet.', which is not "
                    "its place. Rating: [[3]]", output)
    assert verdict.score == 3.0


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
       st.integers(1, 10), st.integers(1, 10))
def test_an_answers_grade_echoed_by_the_judge_never_grades_it(prose: str, own: int,
                                                               given_grade: int) -> None:
    output = f"{prose}\nRating: [[{own}]] from the assistant itself."
    reply = f"The assistant wrote:\n{output}\nThat is not its place.\nRating: [[{given_grade}]]"
    verdict = grade(reply, output)
    # The judge's own "Rating: [[n]]" reads as a quote when the answer holds those very words:
    # then there is no grade and the item is not passed (counted), never graded by the answer's.
    assert verdict.score == given_grade or (own == given_grade and verdict.score is None
                                           and verdict.status == "wrong")


def test_a_ten_megabyte_reply_is_graded_and_kept_bounded() -> None:
    reply = "x" * 10_000_000 + " Rating: [[4]]"
    verdict = grade(reply)
    [judgment] = verdict.judgments
    assert verdict.score == 4.0 and judgment.reply_chars == len(reply)
    assert len(judgment.reply) == REPLY_KEEP


def test_pass_at_sets_what_passes() -> None:
    assert grade("Rating: [[7]]", pass_at=6.5).passed
    assert not grade("Rating: [[7]]").passed


def test_the_prompt_and_system_are_fastchats_by_category() -> None:
    judges = Recorded()
    mt_bench.score("51", MATH, {"judge": "gpt-4"}, judges=judges)
    mt_bench.score("A poem.", WRITING, {"judge": "gpt-4"}, judges=judges)
    assert judges.asked == [
        ("gpt-4", SINGLE_MATH_V1.render(question="What is 17 * 3?", answer="51",
                                        ref_answer_1="51"), "You are a helpful assistant."),
        ("gpt-4", SINGLE_V1.render(question="Write a poem.", answer="A poem."),
         "You are a helpful assistant."),
    ]


def test_a_category_judged_against_a_reference_without_one_asks_no_judge() -> None:
    judges = Recorded()
    no_reference = Example("mt_bench/111", "q", "", "math", {"category": "math"})
    verdict = mt_bench.score("51", no_reference, {"judge": "gpt-4"}, judges=judges)
    assert verdict.status == "unjudged" and "give the loader's reference: file" in verdict.detail
    assert judges.asked == []


def test_a_panel_grades_with_the_mean() -> None:
    judges = Recorded({"'s Answer]\nA poem.": "Rating: [[6]]"}, "Rating: [[9]]")
    verdict = mt_bench.score("A poem.", WRITING, {"judge": ["a", "b"]}, judges=judges)
    assert verdict.score == 6.0 and [name for name, _, _ in judges.asked] == ["a", "b"]


@pytest.mark.parametrize(("options", "why"), [
    ({}, "judge must name a judge"),
    ({"judge": "g", "pass_at": 11}, "pass_at must be a grade from 1 to 10"),
    ({"judge": "g", "pass_at": True}, "pass_at must be a grade from 1 to 10"),
    ({"judge": "g", "template": "x"}, "unknown mt_bench scorer option 'template'"),
])
def test_bad_options_say_why(options: dict[str, Any], why: str) -> None:
    assert why in (mt_bench.check_options(options) or "")


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.sampled_from("[]0123456789.- Rating:\n"), max_size=60),
       st.text(max_size=30))
def test_any_reply_is_a_grade_on_the_scale_or_unjudged(reply: str, output: str) -> None:
    verdict = grade(reply, output)
    if verdict.status == "unjudged":
        assert verdict.score is None and verdict.judgments[0].note
    elif verdict.judgments[0].planted:  # its only grades were the output's own: not passed
        assert verdict.status == "wrong" and verdict.score is None
    else:
        assert verdict.score is not None and 1 <= verdict.score <= 10


# ---- the sweep -------------------------------------------------------------------------------


def judged_spec(root: Path, models: tuple[str, ...], scorer: str = "{name: mt_bench, judge: gpt-4}",
                reference: bool = True) -> str:
    ref = f"  reference: {root}/reference_answer/gpt-4.jsonl\n" if reference else ""
    return (f"benchmark: mt_bench\ndataset:\n  loader: mt_bench\n  path: {root}/question.jsonl\n"
            f"{ref}judges:\n  gpt-4: {{provider: replay, path: "
            f"{root}/model_judgment/gpt-4_single.jsonl}}\nscorer: {scorer}\narms:\n"
            f"{arms_of(*models, root=root)}")


def test_a_sweep_grades_each_answer_with_the_replayed_judge(pytester: pytest.Pytester,
                                                           sweep: Sweep) -> None:
    make_spec(pytester, judged_spec(FIXTURE, ("tiny-a", "tiny-b")))
    _, _, rows = sweep.run()
    got = {(r["arm"], r["task_id"].split("/")[1]): (r["status"], r.get("score")) for r in rows}
    assert got == {
        ("tiny-a", "81"): ("correct", 8), ("tiny-a", "91"): ("wrong", 6.5),
        ("tiny-a", "101"): ("wrong", 7), ("tiny-a", "111"): ("correct", 10),
        ("tiny-a", "121"): ("correct", 9),
        # FastChat's parse gives 10 here, from the answer's own "Rating: [[10]]" the judge quotes
        ("tiny-b", "81"): ("wrong", 3), ("tiny-b", "91"): ("unjudged", None),
        ("tiny-b", "101"): ("wrong", 1), ("tiny-b", "111"): ("wrong", 2),
        ("tiny-b", "121"): ("wrong", 1),
    }
    recorded = {(r["model"], str(r["question_id"])): r
                for r in lines(FIXTURE / "model_judgment" / "gpt-4_single.jsonl")}
    for row in rows:
        [judgment] = row["judgments"]
        record = recorded[(row["arm"], row["task_id"].split("/")[1])]
        assert judgment["reply"] == record["judgment"] and judgment["prompt"] == \
            record["user_prompt"]
        assert judgment["judge"] == "gpt-4" and judgment["model"] == "gpt-4"
        assert judgment["prompt_sha256"] == prompt_digest(record["user_prompt"],
                                                          "You are a helpful assistant.")


def test_a_prompt_the_judge_did_not_record_leaves_the_answer_unjudged(
        pytester: pytest.Pytester, sweep: Sweep) -> None:
    # One question's text changed by a letter: its prompt is no longer the recorded one.
    root = pytester.path / "data"
    shutil.copytree(FIXTURE, root)
    questions = root / "question.jsonl"
    questions.write_text(questions.read_text().replace("the sea", "the see"))
    make_spec(pytester, judged_spec(root, ("tiny-a",)))
    _, _, rows = sweep.run()
    row = next(r for r in rows if r["task_id"] == "mt_bench/81")
    assert row["status"] == "unjudged" and row["output"] and "score" not in row
    assert "no recorded judgment of this prompt for question 81" in row["detail"]
    assert "(line 1) at character " in row["detail"]
    assert "poem about the sea." in row["detail"] and "poem about the see." in row["detail"]


def test_bad_scorer_options_stop_collection_naming_the_key(pytester: pytest.Pytester,
                                                           sweep: Sweep) -> None:
    make_spec(pytester, judged_spec(FIXTURE, ("tiny-a",), "{name: mt_bench, judge: gpt-4, "
                                                          "pass_at: 12}"))
    result, _, rows = sweep.run()
    result.stdout.fnmatch_lines(["*demo.yaml:*scorer*pass_at must be a grade from 1 to 10*"])
    assert rows == []


@needs_data
def test_gpt4s_recorded_judgments_give_fastchats_figures(pytester: pytest.Pytester,
                                                         sweep: Sweep,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(Path(__file__).resolve().parents[2] / "bench_specs",
                    pytester.path / "bench_specs")
    monkeypatch.setenv("ECHO_BENCH_MT_BENCH", str(DATA))
    result, _, rows = sweep.run("bench_specs/mt_bench.yaml")
    assert result.ret in (0, 1) and len(rows) == 240
    recorded = {(r["model"], f"mt_bench/{r['question_id']}"): r
                for r in lines(DATA / "model_judgment" / "gpt-4_single.jsonl") if r["turn"] == 1}
    sums = {m: sum(r["score"] for r in rows if r["arm"] == m) for m in MODELS}
    assert sums == {"mistral-orpo-capybara": 570, "mistral-orpo-mix": 514.5,
                    "mistral-orpo-trl": 618.5}
    assert {m: s / 80 for m, s in sums.items()} == {"mistral-orpo-capybara": 7.125,
                                                   "mistral-orpo-mix": 6.43125,
                                                   "mistral-orpo-trl": 7.73125}
    for row in rows:
        record = recorded[(row["arm"], row["task_id"])]
        assert row["score"] == record["score"], row["task_id"]
        assert row["judgments"][0]["reply"] == record["judgment"]
        assert row["judgments"][0]["model"] == "gpt-4"


def test_the_shipped_spec_skips_without_its_data(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(Path(__file__).resolve().parents[2] / "bench_specs",
                    pytester.path / "bench_specs")
    monkeypatch.setenv("ECHO_BENCH_MT_BENCH", str(pytester.path / "absent"))
    result = pytester.runpytest("bench_specs/mt_bench.yaml", "-p", "no:cacheprovider", "-rs",
                                "--bench-out", str(pytester.path / "none.jsonl"))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*SKIPPED*dataset not found*mt_bench.yaml marks it optional*"])


@needs_data
def test_the_recorded_answers_judged_later_by_the_stage_give_the_same_figures(
        pytester: pytest.Pytester, sweep: Sweep, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(Path(__file__).resolve().parents[2] / "bench_specs",
                    pytester.path / "bench_specs")
    monkeypatch.setenv("ECHO_BENCH_MT_BENCH", str(DATA))
    spec = pytester.path / "bench_specs" / "mt_bench.yaml"
    result, _, rows = sweep.run(str(spec), "--bench-judge", "later")
    assert result.ret == 0 and {r["status"] for r in rows} == {"unjudged"} and len(rows) == 240
    out = pytester.path / "judged.jsonl"
    assert main(["judge", str(sweep.out), "--spec", str(spec), "-o", str(out)]) == 0
    judged = read_rows(out)[1]
    assert {m: sum(r["score"] for r in judged if r["arm"] == m) / 80 for m in MODELS} == {
        "mistral-orpo-capybara": 7.125, "mistral-orpo-mix": 6.43125, "mistral-orpo-trl": 7.73125}
