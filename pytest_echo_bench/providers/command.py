"""Model CLIs as a provider: run an argv, prompt on stdin or in an argument, answer on stdout.

Every call runs isolated. A model CLI started inside a project reads that project's settings,
hooks and instructions file (and the user's), and once answered as the wrong agent because of
it. So each call gets an empty temporary working directory, a HOME and a TMPDIR beside it (all
removed afterwards), and an environment reduced to an allow-list plus the variable names the arm
lists in ``env:``. A call ends when the CLI exits (or times out); then its whole process group is
killed, helpers it started included, and its output is capped (``subproc``).

Each call also runs in a PID namespace of its own where the machine allows (``cli_isolation``), so
it cannot read the environment of the process that started it from ``/proc``.

A plain ``argv:`` arm's output is its answer and a non-zero exit is transient; a preset reads its
CLI's output the way that CLI writes it (``claude_cli`` for the ``claude`` preset).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_echo_bench.errors import (
    ArmError,
    LocalError,
    PermanentError,
    TransientError,
    UnavailableError,
)
from pytest_echo_bench.providers import claude_cli, cli_isolation, subproc
from pytest_echo_bench.providers.base import (
    BaseProvider,
    Caller,
    Completion,
    ProviderInfo,
    Request,
    check_options,
    option,
)
from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.spec.load import ArmSpec, Spec
from pytest_echo_bench.store.redaction import Secrets, redact

_KNOWN = {"argv", "preset", "model", "binary", "prompt", "env", "keep_home", "max_output_bytes"}
# An answer is kilobytes; the cap is there for a CLI gone wrong (a loop, a binary dump), which
# would otherwise fill memory and the results file. A row's JSON may be up to 6x this (NUL is
# stored as \u0000, which reads back as the NUL it was).
MAX_OUTPUT_BYTES = 4 << 20
# stderr only explains a failure (a message shows its last 2000 characters): its tail is kept.
MAX_STDERR_BYTES = 64 << 10
# Locale and terminal only: no keys, no project variables, no config-directory overrides.
_ALLOWED_ENV = ("PATH", "LANG", "LC_ALL", "TERM")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PROMPT = "{prompt}"
# What bubblewrap and unshare print when the CLI itself cannot be executed
# (their exit status 1, 126, 127).
_LAUNCHER_EXEC = re.compile(r"\A(?:bwrap: execvp|unshare: failed to execute) .*: ([^\n]+)\n?\Z")
# Our own machine's trouble while preparing or starting a call: retrying repeats it, recording it
# would grade a full disk as a wrong answer.
_LOCAL_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM, errno.EAGAIN}
)
LOCAL_HINT = (
    "free the resource (open files: raise `ulimit -n` or lower --bench-concurrency; disk: free "
    "space), then resume"
)
EXEC_HINT = (
    "set binary: to an executable file (a script needs a #! line naming an interpreter that exists)"
)
# (name, exit status, stdout, stderr, what its messages must not show) -> the answer, or raise
Reader = Callable[[str, int, str, str, Secrets], Completion]


@dataclass(frozen=True)
class Preset:
    argv: tuple[str, ...]  # after the model is substituted for "{model}"
    env: tuple[str, ...]  # passed through from our environment unless the arm lists its own
    fixed_env: tuple[tuple[str, str], ...]  # set for every call (a variable the arm lists wins)
    reader: Reader


PRESETS = {
    # Checked against claude 2.1.332 (see claude_cli). --setting-sources "" keeps it from loading
    # user and project settings (hooks, apiKeyHelper, env) and CLAUDE.md; --output-format json
    # says exactly which text is the answer and which the CLI's own message.
    "claude": Preset(
        argv=(
            "claude",
            "--print",
            "--model",
            "{model}",
            "--setting-sources",
            "",
            "--output-format",
            "json",
        ),
        env=("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),
        # Retries are ours (one classifier sees every error, backoff applied once, as with the SDKs'
        # max_retries=0); no telemetry, update checks or error reports from inside a benchmark.
        fixed_env=(
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ),
        reader=claude_cli.read,
    ),
}


@dataclass
class CommandProvider(BaseProvider):
    name: str
    argv: tuple[str, ...]  # argv[0] is an absolute path, resolved once at build time
    prompt_mode: str
    env_names: tuple[str, ...]
    keep_home: bool
    fixed_env: tuple[tuple[str, str], ...] = ()
    reader: Reader | None = None
    max_output_bytes: int = MAX_OUTPUT_BYTES
    secrets: Secrets = Secrets()  # redacted from its output before a message cuts it
    # the launcher giving each call its own PID namespace (cli_isolation.prefix)
    isolation: tuple[str, ...] = ()

    def complete(self, request: Request) -> Completion:
        with self._scratch() as tmp:
            done = self._run(request, tmp)
        if done.timed_out:
            raise TransientError(
                f"{self.name} timed out after {request.timeout_s:g} s; its process group was killed"
            )
        out, err = (
            done.stdout.data.decode("utf-8", "replace"),
            done.stderr.data.decode("utf-8", "replace"),
        )
        rc = done.returncode
        if self.isolation:
            not_run = _LAUNCHER_EXEC.match(err) if rc in (1, 126, 127) and not out else None
            if not_run is not None:  # as Popen would have said it without the launcher
                raise ArmError(
                    f"{self.name} could not be started: {not_run.group(1)} ({self.argv[0]})",
                    hint=EXEC_HINT,
                )
            # bubblewrap's 128+N for a CLI killed by signal N
            rc = -(rc - 128) if 128 < rc < 160 else rc
        dropped = done.stdout.dropped
        if self.reader is not None:
            if dropped:
                # Its result object was cut: there is no answer to read, only a prefix of one.
                raise PermanentError(
                    f"{self.name} printed more than max_output_bytes ({self.max_output_bytes}); "
                    f"{dropped} bytes were dropped and its result could not be read"
                )
            return self.reader(self.name, rc, out, err, self.secrets)
        if rc != 0:
            raise self._failure(rc, out, err)
        extra = {"output_truncated": True, "output_dropped_bytes": dropped} if dropped else {}
        return Completion(out.strip(), extra=extra)

    @contextlib.contextmanager
    def _scratch(self) -> Iterator[Path]:
        """The call's own directory, holding its empty cwd (work), HOME
        and TMPDIR; removed afterwards."""
        try:
            tmp = Path(tempfile.mkdtemp(prefix="echo-bench-cmd-"))
        except OSError as exc:
            raise _local(exc, "its temporary directory could not be created") from exc
        try:
            for sub in ("work", "home", "tmp"):
                (tmp / sub).mkdir()
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise _local(exc, "its temporary directory could not be created") from exc
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, request: Request, tmp: Path) -> subproc.Finished:
        data = self._prompt_bytes(request.prompt)
        argv = (
            [a.replace(PROMPT, request.prompt) for a in self.argv]
            if self.prompt_mode == "arg"
            else list(self.argv)
        )
        # With the prompt in an argument stdin is /dev/null: a CLI
        # reading it gets EOF, never a wait.
        stdin = data if self.prompt_mode == "stdin" else None
        limits = subproc.Limits(request.timeout_s, self.max_output_bytes, MAX_STDERR_BYTES)
        try:
            return subproc.run(
                [*self.isolation, *argv],
                cwd=tmp / "work",
                env=self._env(tmp),
                stdin=stdin,
                limits=limits,
            )
        except OSError as exc:
            raise self._not_started(exc) from exc

    def _prompt_bytes(self, prompt: str) -> bytes:
        """The prompt as the CLI gets it: UTF-8, with surrogate escapes as the bytes they stand for
        (what Python does to an argument), or this item's error if no process can be given it."""
        try:
            data = prompt.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise PermanentError(
                f"{self.name} cannot be given this prompt: it holds a lone surrogate "
                f"(U+{ord(prompt[exc.start]):04X}, not UTF-8)"
            ) from None
        if self.prompt_mode == "arg" and b"\0" in data:
            raise PermanentError(
                f"{self.name} cannot be given this prompt: it holds a NUL character, which "
                "no program "
                "argument can carry (prompt: stdin can)"
            )
        return data

    def _env(self, tmp: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in _ALLOWED_ENV if k in os.environ}
        env["HOME"] = os.path.expanduser("~") if self.keep_home else str(tmp / "home")
        # Node CLIs leave sockets and probes in TMPDIR (claude: cc-socks/, claude-<uid>/): inside
        # the call's directory they go with it.
        env["TMPDIR"] = str(tmp / "tmp")
        env.update(self.fixed_env)
        env.update({k: os.environ[k] for k in self.env_names if k in os.environ})
        return env

    def _not_started(self, exc: OSError) -> Exception:
        """Popen failed: our machine (no file descriptors, no memory) or the executable itself."""
        if exc.errno in _LOCAL_ERRNOS:
            return _local(exc, "it could not be started")
        # It was found when the arm was built; it cannot be executed now (ENOENT: it, or the
        # interpreter its #! line names, is missing; EACCES: not executable; ENOEXEC: no #!).
        return ArmError(
            f"{self.name} could not be started: {exc.strerror or exc} ({self.argv[0]})",
            hint=EXEC_HINT,
        )

    def _failure(self, rc: int, out: str, err: str) -> Exception:
        text = "\n".join(s for s in (err.strip(), out.strip()) if s)
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        # The tail, long enough that the Classifier still sees a limit message after a traceback.
        # Redacted, then cut: cut first, a key across the cut kept its far piece.
        message = (
            f"{self.name} {how}: "
            f"{redact(text, self.secrets, limit=2000, tail=True) or '(no output)'}"
        )
        # An unrecognised non-zero exit is transient. A model CLI fails mostly the way its API
        # does (overloaded, rate limited, network) and reports it only as text; a permanent
        # error would be recorded as a failed row that resume never retries, while a transient
        # one is retried and, if it persists, left incomplete for a resume. A CLI that fails on
        # every call (a bad flag) then stops the run unrecorded instead of filling the results
        # with errors. The Classifier still turns exhaustion text ("usage limit", spec
        # `errors.exhaustion` patterns) into a stop.
        return TransientError(message)


def _local(exc: OSError, what: str) -> LocalError:
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return LocalError(
        f"a command call failed on this machine: {what}: {exc.strerror or exc} ({name}); "
        f"{LOCAL_HINT}"
    )


def _argv(arm: ArmSpec, spec: Spec) -> tuple[list[str], Preset | None]:
    preset_name = option(arm, "preset", str, None, spec)
    raw = arm.options.get("argv")
    if isinstance(raw, str):
        raise spec.error(
            "argv must be a list of arguments, not a shell string: argv: [program, arg, ...] "
            "(it is never run through a shell)",
            "arms",
            arm.name,
            "argv",
        )
    model = option(arm, "model", str, None, spec)
    if preset_name is None:
        if raw is None:
            raise spec.error(
                f"a command arm needs argv: [program, arg, ...] or preset: ({', '.join(PRESETS)})",
                "arms",
                arm.name,
            )
        if model is not None:
            raise spec.error(
                "model is only used with a preset; put the model in argv", "arms", arm.name, "model"
            )
        if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
            raise spec.error(
                f"argv must be a non-empty list of strings, got {raw!r}", "arms", arm.name, "argv"
            )
        return list(raw), None
    if raw is not None:
        raise spec.error("give either argv or preset, not both", "arms", arm.name, "argv")
    preset = PRESETS.get(preset_name)
    if preset is None:
        raise spec.error(
            f"unknown preset {preset_name!r}; known: {', '.join(PRESETS)}",
            "arms",
            arm.name,
            "preset",
        )
    if not model:
        raise spec.error(f"preset {preset_name} needs a 'model'", "arms", arm.name, "model")
    return [a.replace("{model}", model) for a in preset.argv], preset


def _resolve(program: str, arm: ArmSpec, spec: Spec) -> str:
    """The executable's absolute path: the call runs in a temporary directory, not here."""
    if os.sep in program and not os.path.isabs(program):
        program = str(spec.path.parent / program)  # relative to the spec, like dataset paths
    found = shutil.which(program)
    if found is None:
        raise UnavailableError(f"arm {arm.name!r} runs {program!r}, which was not found on PATH: "
                               f"install it or set binary: /path/to/{os.path.basename(program)}")
    return os.path.abspath(found)


def _env_names(arm: ArmSpec, spec: Spec, default: tuple[str, ...]) -> tuple[str, ...]:
    names = option(arm, "env", list, list(default), spec)
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise spec.error(
                f"env lists variable names to pass through (e.g. ANTHROPIC_API_KEY), got {name!r}",
                "arms",
                arm.name,
                "env",
            )
    return tuple(names)


def _check_prompt(argv: list[str], mode: str, arm: ArmSpec, spec: Spec) -> None:
    if mode not in ("stdin", "arg"):
        raise spec.error(f"prompt must be stdin or arg, got {mode!r}", "arms", arm.name, "prompt")
    has_slot = any(PROMPT in a for a in argv[1:])
    if mode == "arg" and not has_slot:
        raise spec.error(
            "prompt: arg needs an argument containing {prompt}", "arms", arm.name, "argv"
        )
    if mode == "stdin" and has_slot:
        raise spec.error(
            "argv contains {prompt} but the prompt goes to stdin: set prompt: arg",
            "arms",
            arm.name,
            "prompt",
        )


def build(arm: ArmSpec, spec: Spec, caller: Caller) -> CommandProvider:
    check_options(arm, spec, "command", _KNOWN)
    argv, preset = _argv(arm, spec)
    mode = option(arm, "prompt", str, "stdin", spec)
    _check_prompt(argv, mode, arm, spec)
    env_names = _env_names(arm, spec, preset.env if preset else ())
    keep_home = option(arm, "keep_home", bool, False, spec)
    cap = option(arm, "max_output_bytes", int, MAX_OUTPUT_BYTES, spec)
    if cap < 1:
        raise spec.error(
            f"max_output_bytes must be a positive number of bytes, got {cap!r}",
            "arms",
            arm.name,
            "max_output_bytes",
        )
    argv[0] = _resolve(option(arm, "binary", str, argv[0], spec), arm, spec)
    return CommandProvider(
        os.path.basename(argv[0]),
        tuple(argv),
        mode,
        env_names,
        bool(keep_home),
        preset.fixed_env if preset else (),
        preset.reader if preset else None,
        cap,
        spec_secrets(spec),
        cli_isolation.prefix(),
    )


def executable(arm: ArmSpec) -> str:
    """What an arm runs, for a message that must say where to look."""
    options = arm.options
    argv, preset = options.get("argv"), PRESETS.get(str(options.get("preset")))
    program = argv[0] if isinstance(argv, list) and argv else preset.argv[0] if preset else "?"
    return f"executable {options.get('binary') or program}"


# The key variables are the claude preset's: the ones it passes on to the CLI.
PROVIDER = ProviderInfo(build, cacheable=True, key_env=PRESETS["claude"].env, describe=executable)
