"""--bench-stop-when-decided end to end: a sweep that stops once the comparison is decided (exit 0,
reason decided), a resume that continues it, and equal arms that run to the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Sweep, make_spec, read_rows
from pytest_echo_bench.cli.main import main
from pytest_echo_bench.plugin.exit_status import Outcomes, Stops, decide
from pytest_echo_bench.store.files import StopReason

CLEAR = "  strong: {provider: sim, accuracy: 1.0}\n  weak: {provider: sim, accuracy: 0.3}"
EQUAL = (
    "  left: {provider: sim, accuracy: 0.7, seed: 1}\n  right: {provider: sim, accuracy: 0.7, "
    "seed: 2}"
)


def _spec(n: int, arms: str, decide: str = "") -> str:
    items = "\n".join(
        f'    - {{id: q{i}, input: "2+2=? ({i})", target: "4", subtask: s{i % 4}}}'
        for i in range(n)
    )
    return (
        f"benchmark: demo\ndataset:\n  loader: inline\n  items:\n{items}\nscorer: "
        f"exact\narms:\n{arms}\n{decide}"
    )


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()  # what the in-process sweeps printed
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def _marker(sweep: Sweep) -> dict[str, object]:
    data: dict[str, object] = json.loads(Path(f"{sweep.out}.stop.json").read_text())
    return data


def test_a_clearly_better_arm_stops_the_sweep_early_with_exit_0_and_resume_continues_it(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(120, CLEAR))
    result, meta, rows = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == 0
    assert meta is not None and meta["decide"] == {
        "pairs": [["demo", "strong", "weak"]],
        "alpha": 0.05,
        "margin": 0.0,
    }
    assert meta["order"] == {"order": "random", "scheme": "stratified-subtask", "seed": 0}
    assert 0 < len(rows) < 240
    marker = _marker(sweep)
    assert marker["reason"] == "decided" and "strong better than weak at" in str(marker["message"])
    (pair,) = marker["pairs"]  # type: ignore[misc]
    assert (
        pair["verdict"] == "strong better than weak"
        and pair["ci"][0] > 0
        and pair["p_holm"] <= 0.05
    )
    assert pair["decided_at"] == len(rows) // 2  # a serial run stops at the item that decided
    summary = json.loads(Path(f"{sweep.out}.summary.json").read_text())
    assert (
        summary["stopped"].startswith("decided:")
        and summary["decide"]["pairs"][0]["decided_at"] == pair["decided_at"]
    )
    result.stdout.fnmatch_lines(
        [
            "*echo-bench: stopping: decided: strong better than weak at*",
            "*decide strong vs weak: strong better than weak, decided at*anytime-valid p*",
            "*stopped early (decided:*; resume with:*",
            "*pytest --bench-resume*",
        ]
    )
    # The report knows how the data were collected: the fixed-n figures are not valid for the pair.
    seq = json.loads(_report(capsys, str(sweep.out), "--format", "json"))["sequential"]
    assert seq["collection"] == "stopped-when-decided" and not seq["fixed_n_valid"]
    assert seq["pairs"][0]["decided_at"] == pair["decided_at"]
    assert "not valid for strong vs weak" in _report(capsys, str(sweep.out))
    page = _report(capsys, str(sweep.out), "--format", "html")
    assert (
        '<section id="sequential" data-collection="stopped-when-decided"><h2>Anytime-valid '
        "comparison</h2><p>this sweep stopped once" in page
    )
    assert "<td class=\"text\">strong better than weak</td>" in page
    # The printed resume command continues the sweep past the decision, to the end.
    result, _, rows = sweep.run("--bench-resume", str(sweep.out))
    assert result.ret == 0 and len(rows) == 240
    result.stdout.fnmatch_lines(["*decided before this resume; it runs on*"])
    assert not Path(f"{sweep.out}.stop.json").exists()
    assert (
        json.loads(_report(capsys, str(sweep.out), "--format", "json"))["sequential"]["collection"]
        == "ran-to-end"
    )


def test_equal_arms_run_to_the_end_with_the_fixed_n_report_and_the_anytime_valid_figures(
        pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]) -> None:
    make_spec(pytester, _spec(60, EQUAL, "decide: {pairs: [[left, right]], alpha: 0.05}\n"))
    result, meta, rows = sweep.run()
    assert result.ret == 0 and len(rows) == 120
    assert meta is not None and meta["decide"]["pairs"] == [["demo", "left", "right"]]
    assert not Path(f"{sweep.out}.stop.json").exists()
    result.stdout.fnmatch_lines(["*decide left vs right: undecided; at 60 items anytime-valid p*"])
    out = _report(capsys, str(sweep.out))
    assert (
        "ran to the end: the fixed-n paired comparison is valid" in out
        and "not valid for" not in out
    )


def test_under_xdist_the_controller_decides_and_stops_the_workers(
    pytester: pytest.Pytester, sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    make_spec(pytester, _spec(150, CLEAR))
    result, _, rows = sweep.run("-n", "2", "--bench-stop-when-decided", "demo/strong,demo/weak")
    assert result.ret == 0 and len(rows) < 300
    marker = _marker(sweep)
    assert marker["reason"] == "decided"
    keys = {(r["task_id"], r["arm"]) for r in rows}
    assert len(keys) == len(rows)  # nothing recorded twice
    # Reports reach the controller in another order than rows reach the file; the controller reads
    # the file, so the report's replay of it decides at the same item, the same way.
    (at_stop,) = marker["pairs"]  # type: ignore[misc]
    seq = json.loads(_report(capsys, str(sweep.out), "--format", "json"))["sequential"]
    (pair,) = seq["pairs"]
    assert (pair["decided_at"], pair["direction"], pair["verdict"]) == (
        at_stop["decided_at"], at_stop["direction"], at_stop["verdict"])
    assert pair["n"] >= at_stop["n"]  # rows of calls in flight at the stop land after it
    assert json.loads(Path(f"{sweep.out}.summary.json").read_text())["decide"] == seq


def test_a_non_inferiority_margin_decides_non_inferior(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    arms = (
        "  cheap: {provider: sim, accuracy: 0.95}\n  strong: {provider: sim, accuracy: 0.95, "
        "seed: 3}"
    )
    make_spec(pytester, _spec(400, arms, "decide: {pairs: [[cheap, strong]], margin: 0.2}\n"))
    result, _, rows = sweep.run()
    assert result.ret == 0 and len(rows) < 800
    assert "cheap non-inferior to strong (margin 0.2)" in str(_marker(sweep)["message"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--bench-stop-when-decided", "strong,nope"],
            "*--bench-stop-when-decided: unknown arm 'nope'*",
        ),
        (["--bench-stop-when-decided", "strong"], "*a pair is two arms*"),
        (
            ["--bench-stop-when-decided", "strong,weak", "--bench-order", "file"],
            "*needs the random order*",
        ),
    ],
)
def test_a_plan_that_cannot_run_is_a_usage_error_before_the_file_is_made(
    pytester: pytest.Pytester, sweep: Sweep, args: list[str], message: str
) -> None:
    make_spec(pytester, _spec(4, CLEAR))
    result, _, _ = sweep.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not sweep.out.exists()


@pytest.mark.parametrize(
    ("decide", "message"),
    [
        ("decide: {pairs: [[strong, nope]]}", "*decide.pairs.0*not an arm of this spec*"),
        ("decide: {pairs: [[strong, strong]]}", "*compared with itself*"),
        ("decide: {pairs: [[strong, weak]], alpha: 0}", "*decide.alpha*"),
        ("decide: {pairs: [[strong, weak]], margin: -0.1}", "*decide.margin*"),
        ("decide: {pairs: [], alpha: 0.05}", "*pairs must be a list*"),
        ("decide: {pairs: [[strong, weak]], when: now}", "*unknown key 'when'*"),
        (
            "decide: {pairs: [[strong, weak], [weak, strong]]}",
            "*decide.pairs.1*listed already*compared both ways*",
        ),
        (
            "decide: {pairs: [[strong, weak]], alpha: 1e-3}",
            "*decide.alpha*YAML reads it as text: write 1.0e-3*",
        ),
    ],
)
def test_a_bad_decide_section_is_a_spec_error_naming_its_key(
    pytester: pytest.Pytester, sweep: Sweep, decide: str, message: str
) -> None:
    make_spec(pytester, _spec(4, CLEAR, decide + "\n"))
    result, _, _ = sweep.run()
    assert result.ret != 0
    result.stdout.fnmatch_lines([message])


def test_a_resume_keeps_the_plan_of_its_meta_line(pytester: pytest.Pytester, sweep: Sweep) -> None:
    # Stopped by quota before a decision: the resume watches the same
    # pair, with the rows already there.
    arms = CLEAR.replace("accuracy: 0.3}", "accuracy: 0.3, faults: {exhaustion_after: 6}}")
    make_spec(pytester, _spec(120, arms))
    result, _, rows = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == 2 and _marker(sweep)["reason"] == "exhausted"
    make_spec(pytester, _spec(120, CLEAR))
    result, meta, rows = sweep.run(
        "--bench-resume",
        str(sweep.out),
        "--bench-allow-mismatch",
        "--bench-stop-when-decided",
        "weak,strong",
    )
    assert result.ret == 0 and _marker(sweep)["reason"] == "decided" and len(rows) < 240
    result.stdout.fnmatch_lines(
        [
            "*--bench-stop-when-decided ignored: a resume keeps the pairs its meta line "
            "records (strong vs weak)*"
        ]
    )
    assert meta is not None and meta["decide"]["pairs"] == [["demo", "strong", "weak"]]
    _, rows = read_rows(sweep.out)
    assert len({(r["task_id"], r["arm"]) for r in rows}) == len(rows)


def test_two_specs_with_different_alpha_are_refused(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    make_spec(pytester, _spec(4, CLEAR, "decide: {pairs: [[strong, weak]], alpha: 0.05}\n"), "one")
    make_spec(pytester, _spec(4, CLEAR, "decide: {pairs: [[strong, weak]], alpha: 0.01}\n").replace(
        "benchmark: demo", "benchmark: other"), "two")
    result, _, _ = sweep.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*decide sections give different alpha or margin*"])


@pytest.mark.parametrize(("marked", "reported", "status"), [
    (StopReason("decided", "a better than b"), None, 0),
    # the marker could not be written: still a decision
    (None, StopReason("decided", "a better than b"), 0),
    (StopReason("exhausted", "quota"), StopReason("decided", ""), 2),  # the first stop wins
])
def test_a_decided_stop_is_exit_0_and_any_other_stop_still_2(
    marked: StopReason | None, reported: StopReason | None, status: int
) -> None:
    decided = decide(Outcomes(int(pytest.ExitCode.INTERRUPTED), left=3), Stops(marked, reported))
    assert decided.status == status and decided.stop == (marked or reported)


def test_a_broken_spec_shows_its_own_error_before_the_pair_it_hides(
    pytester: pytest.Pytester, sweep: Sweep
) -> None:
    # not a valid arm name
    make_spec(pytester, _spec(4, CLEAR + "\n  \u00e9: {provider: sim, accuracy: 0.5}"))
    result, _, _ = sweep.run("--bench-stop-when-decided", "strong,weak")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*demo.yaml:*arm*"])
    assert "the specs have" not in result.stderr.str()


def test_the_start_line_names_both_arms_alike(pytester: pytest.Pytester, sweep: Sweep) -> None:
    make_spec(pytester, _spec(60, CLEAR))
    result, _, _ = sweep.run("--bench-stop-when-decided", "strong,weak")
    result.stdout.fnmatch_lines(
        ["*echo-bench: stops when decided: demo/strong vs demo/weak (anytime-valid*"]
    )
