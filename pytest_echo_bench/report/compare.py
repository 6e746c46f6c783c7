"""``echo-bench compare`` in text, markdown, JSON and CSV: one plain record of the comparison
(``compare_json``), which every format draws. Text from the files (task ids, answers, served
models, run ids) is shown escaped (``store.safe_text``), line feeds too, and cut: a task id or a
served model holding a line feed would otherwise draw lines of its own (a forged arm block)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from pytest_echo_bench.analysis.across import ArmFigures
from pytest_echo_bench.report.formats.csv import neutralise
from pytest_echo_bench.results.across import ArmPairing, Flip, Paired, Side
from pytest_echo_bench.store.safe_text import shown, shown_json

FLIPS_SHOWN = 100  # flips (and unpaired items) the text, markdown and html list; JSON/CSV: all
ANSWER_SHOWN = 80  # characters of an answer in a text line or table cell


def comparable(a: ArmPairing) -> tuple[str, list[str]]:
    """"yes", "no" or "unknown" for an arm pairing, and why in words."""
    why = []
    if a.changed:
        why.append(f"items changed since BASE (their digest differs): {len(a.changed)}")
    why += [f"{c} changed" for c in a.arm_changes]
    if a.served_changed:
        why.append("the served model changed: " + _served(a.base) + " -> " + _served(a.cand))
    if why:
        return "no", why
    if a.unknown:
        return "unknown", [f"{a.unknown} items paired by key alone (no item digest recorded)"]
    return "yes", []


def _served(side: Side) -> str:
    return ", ".join(sorted(side.served)) or "unknown"


def _side(side: Side) -> dict[str, Any]:
    return {"rows": side.rows, "error_rate": side.rate(side.errors),
            "unparseable_rate": side.rate(side.unparseable),
            "unjudged_rate": side.rate(side.unjudged), "cost_usd": side.cost_usd,
            "wall_mean": side.wall_mean, "served_models": dict(sorted(side.served.items()))}


def _flip(f: Flip) -> dict[str, Any]:
    return {"benchmark": f.benchmark, "task_id": f.task_id, "epoch": f.epoch,
            "direction": "regressed" if f.regressed else "fixed",
            "base_answer": f.base_answer, "cand_answer": f.cand_answer}


def _ci(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [ci[0], ci[1]]


def arm_json(f: ArmFigures) -> dict[str, Any]:
    a = f.pairing
    verdict, why = comparable(a)
    return {
        "label": f.label, "benchmark": a.benchmark, "base_arm": a.base_arm,
        "cand_arm": a.cand_arm, "n": a.n, "base_rate": f.base_rate, "base_ci95": _ci(f.base_ci),
        "cand_rate": f.cand_rate, "cand_ci95": _ci(f.cand_ci), "regressed": a.regressed,
        "fixed": a.fixed, "diff": f.diff, "diff_ci95": _ci(f.diff_ci), "method": f.method,
        "p_value": f.p_value, "p_holm": f.p_holm, "comparable": verdict, "why": why,
        "arm_changes": a.arm_changes, "served_model_changed": a.served_changed,
        "unknown_digest": a.unknown, "unjudged_unpaired": a.unjudged,
        "only_base": [list(k) for k in a.only_base], "only_cand": [list(k) for k in a.only_cand],
        "changed_items": [list(k) for k in a.changed],
        "base": _side(a.base), "cand": _side(a.cand), "flips": [_flip(x) for x in a.flips],
    }


def compare_json(paired: Paired, arms: list[ArmFigures]) -> dict[str, Any]:
    """The whole comparison as plain JSON data (every flip and unpaired item listed)."""
    def files(sources: list[tuple[str, str, str]]) -> list[dict[str, str]]:
        return [{"path": p, "run_id": r, "created_at": c} for p, r, c in sources]

    return {
        "base": files(paired.base_sources), "cand": files(paired.cand_sources),
        "arms": [arm_json(f) for f in arms],
        "only_base_arms": [f"{b}/{a}" for b, a in paired.only_base_arms],
        "only_cand_arms": [f"{b}/{a}" for b, a in paired.only_cand_arms],
    }


def one_line(value: Any) -> Any:
    """A JSON-like value with every string in it (keys too) escaped, line feeds and tabs too: the
    text, markdown, CSV and html formats draw it, where a line feed from a file would start a line
    of its own. (JSON writes a line feed as ``\\n`` inside its string: it keeps the text.)"""
    if isinstance(value, str):
        return shown(value, newlines=False)
    if isinstance(value, dict):
        return {shown(str(k), newlines=False): one_line(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [one_line(v) for v in value]
    return value


def render_json(data: dict[str, Any]) -> str:
    return json.dumps(shown_json(data), indent=2, sort_keys=False)


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cis(ci: list[float] | None, sign: str = "") -> str:
    return "-" if ci is None else f"[{ci[0]:{sign}.3f}, {ci[1]:{sign}.3f}]"


def _cut(text: str | None) -> str:
    if text is None:
        return "-"
    one = " ".join(text.split())
    return one if len(one) <= ANSWER_SHOWN else one[: ANSWER_SHOWN - 1] + "…"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def side_by_side(arm: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, BASE, CAND) for the figures shown side by side."""
    b, c = arm["base"], arm["cand"]
    return [("rows", str(b["rows"]), str(c["rows"])),
            ("cost", _money(b["cost_usd"]), _money(c["cost_usd"])),
            ("latency (mean)", _secs(b["wall_mean"]), _secs(c["wall_mean"])),
            ("unparseable", _pct(b["unparseable_rate"]), _pct(c["unparseable_rate"])),
            ("errors", _pct(b["error_rate"]), _pct(c["error_rate"])),
            ("unjudged", _pct(b["unjudged_rate"]), _pct(c["unjudged_rate"])),
            ("served model", ", ".join(b["served_models"]) or "unknown",
             ", ".join(c["served_models"]) or "unknown")]


def unpaired_lines(arm: dict[str, Any]) -> list[str]:
    """What was not paired, counted, then the first items of each kind."""
    lines = []
    for key, said in (("only_base", "items only in BASE"), ("only_cand", "items only in CAND"),
                      ("changed_items", "changed items, not paired")):
        keys = arm[key]
        if keys:
            shown = ", ".join(t if e == 1 else f"{t}#{e}" for t, e in keys[:FLIPS_SHOWN])
            more = f" (and {len(keys) - FLIPS_SHOWN} more)" if len(keys) > FLIPS_SHOWN else ""
            lines.append(f"{said} ({len(keys)}): {shown}{more}")
    if arm["unjudged_unpaired"]:
        lines.append(f"items unjudged on a side, not paired ({arm['unjudged_unpaired']})")
    return lines


def headline(arm: dict[str, Any]) -> str:
    p = "p" if arm["method"] == "paired-t" else "McNemar p"
    return (f"BASE {_r(arm['base_rate'])} {_cis(arm['base_ci95'])}  CAND "
            f"{_r(arm['cand_rate'])} {_cis(arm['cand_ci95'])}  CAND - BASE "
            f"{'-' if arm['diff'] is None else format(arm['diff'], '+.3f')} "
            f"{_cis(arm['diff_ci95'], '+')}  {p} {arm['p_value']:.3g} (Holm "
            f"{'-' if arm['p_holm'] is None else format(arm['p_holm'], '.3g')})")


def render_text(data: dict[str, Any]) -> str:
    data = one_line(data)
    lines = _sources_lines(data)
    for arm in data["arms"]:
        name = arm["label"] if arm["base_arm"] == arm["cand_arm"] else (
            f"{arm['label']} (BASE arm {arm['base_arm']})")
        lines += ["", f"{name}: {arm['n']} paired items, comparable: {arm['comparable']}",
                  "  " + headline(arm),
                  f"  flips: {arm['regressed']} right then wrong, {arm['fixed']} wrong then right"]
        lines += [f"  {w}" for w in arm["why"]]
        lines += [f"  {u}" for u in unpaired_lines(arm)]
        lines += [f"  {k}: {b} -> {c}" for k, b, c in side_by_side(arm)]
        for flip in arm["flips"][:FLIPS_SHOWN]:
            lines.append(f"    {flip['direction']:9} {_item(flip)}  BASE: "
                         f"{_cut(flip['base_answer'])}  CAND: {_cut(flip['cand_answer'])}")
        if len(arm["flips"]) > FLIPS_SHOWN:
            lines.append(f"    ... {len(arm['flips']) - FLIPS_SHOWN} more flips (all in json/csv)")
    return "\n".join(lines + _arms_apart(data))


def _item(flip: dict[str, Any]) -> str:
    return flip["task_id"] if flip["epoch"] == 1 else f"{flip['task_id']}#{flip['epoch']}"


def _sources_lines(data: dict[str, Any]) -> list[str]:
    return [f"{side.upper()}: " + "; ".join(f"{f['path']} (run {f['run_id']}, {f['created_at']})"
                                             for f in data[side]) for side in ("base", "cand")]


def _arms_apart(data: dict[str, Any]) -> list[str]:
    lines = []
    if data["only_base_arms"]:
        lines.append("arms only in BASE (not paired): " + ", ".join(data["only_base_arms"]))
    if data["only_cand_arms"]:
        lines.append("arms only in CAND (not paired): " + ", ".join(data["only_cand_arms"]))
    if not data["arms"]:
        lines.append("no arm is in both runs: nothing was paired (--pair BASEARM=CANDARM pairs "
                     "arms of other names)")
    return [""] + lines if lines else []


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(data: dict[str, Any]) -> str:
    data = one_line(data)
    lines = [f"- {s}" for s in _sources_lines(data)]
    lines += ["", "| arm | n | BASE | CAND | CAND - BASE | p | Holm | right→wrong | wrong→right "
              "| comparable |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in data["arms"]:
        lines.append("| " + " | ".join(_cell(c) for c in (
            arm["label"], str(arm["n"]), f"{_r(arm['base_rate'])} {_cis(arm['base_ci95'])}",
            f"{_r(arm['cand_rate'])} {_cis(arm['cand_ci95'])}",
            f"{'-' if arm['diff'] is None else format(arm['diff'], '+.3f')} "
            f"{_cis(arm['diff_ci95'], '+')}", f"{arm['p_value']:.3g}",
            "-" if arm["p_holm"] is None else f"{arm['p_holm']:.3g}", str(arm["regressed"]),
            str(arm["fixed"]), arm["comparable"])) + " |")
    for arm in data["arms"]:
        lines += ["", f"### {_cell(arm['label'])}", ""]
        lines += [f"- {_cell(w)}" for w in arm["why"] + unpaired_lines(arm)]
        lines += ["", "| figure | BASE | CAND |", "|---|---|---|"]
        lines += [f"| {k} | {_cell(b)} | {_cell(c)} |" for k, b, c in side_by_side(arm)]
        if arm["flips"]:
            lines += ["", "| item | flip | BASE answer | CAND answer |", "|---|---|---|---|"]
            lines += [f"| {_cell(_item(f))} | {f['direction']} | {_cell(_cut(f['base_answer']))} "
                      f"| {_cell(_cut(f['cand_answer']))} |" for f in arm["flips"][:FLIPS_SHOWN]]
    return "\n".join(lines + _arms_apart(data))


ARM_FIELDS = ["label", "benchmark", "base_arm", "cand_arm", "n", "base_rate", "cand_rate",
              "regressed", "fixed", "diff", "method", "p_value", "p_holm", "comparable",
              "unknown_digest", "unjudged_unpaired"]
CSV_FIELDS = ["kind", *ARM_FIELDS, "ci95_lo", "ci95_hi", "task_id", "epoch", "base_answer",
              "cand_answer"]


def render_csv(data: dict[str, Any]) -> str:
    """One line per arm (``kind`` arm), per flip (regressed, fixed) and per unpaired item
    (only_base, only_cand, changed), every one listed."""
    data = one_line(data)
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, lineterminator="\r\n")
    writer.writeheader()
    for arm in data["arms"]:
        ci = arm["diff_ci95"] or [None, None]
        writer.writerow(_safe({"kind": "arm", **{k: arm[k] for k in ARM_FIELDS},
                               "ci95_lo": ci[0], "ci95_hi": ci[1]}))
        named = {"label": arm["label"], "benchmark": arm["benchmark"]}
        for f in arm["flips"]:
            writer.writerow(_safe({"kind": f["direction"], **named, "task_id": f["task_id"],
                                   "epoch": f["epoch"], "base_answer": f["base_answer"],
                                   "cand_answer": f["cand_answer"]}))
        for kind in ("only_base", "only_cand", "changed_items"):
            for task_id, epoch in arm[kind]:
                writer.writerow(_safe({"kind": kind, **named, "task_id": task_id,
                                       "epoch": epoch}))
    return out.getvalue()


def _safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: neutralise(v) if isinstance(v, str) else v for k, v in row.items()}
