"""The harness that runs inside the sandbox: it drops privileges, runs the program, and earns the verdict.

``WRAPPER`` is run as ``python -I -c WRAPPER <in_fd> <verdict_fd>``. It reads its settings, the
program and the run's token from ``in_fd`` (a file only it was given) and closes it before any
untrusted line runs. On ``verdict_fd`` (a pipe to the parent) it writes one ``started`` line just
before the program runs and, only when the program ran to its end and, given tests, the tests'
own ``check`` returned on the candidate, all without raising anything (``BaseException``
included), the token. Exiting early in any way (``SystemExit``, ``os._exit``, a signal)
therefore never yields the token.

The token lives only in a local of ``main``'s frame. The program runs in the same interpreter, so
an audit hook (which Python code cannot remove) refuses the usual routes to another frame or
object: frame and traceback attributes, ``sys._getframe``, tracing and profiling hooks, the
``gc`` object lists, ``ctypes``, ``/proc``, signal handlers (which are given a frame) and
swapping a function's ``__code__``. This is defence in depth, not a proof: see
docs/reliability.md for what remains.
"""

from __future__ import annotations

WRAPPER = r'''
import json, os, resource, sys


class SandboxDenied(ValueError):
    """What the audit hook raises. A ValueError: the standard library's own uses of
    sys._getframe (namedtuple, enum, typing) already tolerate one and carry on."""


def setup(cfg):
    uid, workdir = cfg["uid"], cfg["workdir"]
    if cfg["make_workdir"]:
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root to another uid: every capability goes with it
    os.chdir(workdir)
    with open("main.py", "w", encoding="utf-8") as f:  # for tracebacks and __file__ only
        f.write(cfg["program"])
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    return {"uid": os.getuid(), "workdir": workdir}


def neuter_signals():
    # A signal handler is called with the interrupted frame, whose f_back leads here. Every
    # built-in module is loaded first and no new one may be made, so a fresh _signal cannot be.
    import importlib, _imp, _signal
    for name in sys.builtin_module_names:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for name in ("signal", "setitimer", "alarm", "set_wakeup_fd"):
        if hasattr(_signal, name):
            setattr(_signal, name, None)

    def refuse(*args):
        raise ImportError("no new built-in module in the sandbox")

    _imp.create_builtin = _imp.exec_builtin = refuse


def guard():
    denied = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
                        "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                        "ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof",
                        "ctypes.string_at", "ctypes.cdata", "ctypes.call_function", "cpython.PyInterpreterState_Clear"})
    realpath = os.path.realpath

    def hook(event, args):
        if event in denied:
            raise SandboxDenied(event)
        if event == "import" and str(args[0]).partition(".")[0] in ("ctypes", "_ctypes"):
            raise ModuleNotFoundError("ctypes is not available in the sandbox")  # as on a build without it
        # Reading a frame off a traceback, generator or coroutine; reading __code__ is harmless.
        if event == "object.__getattr__" and len(args) > 1 and str(args[1]).endswith("_frame"):
            raise SandboxDenied("reading " + str(args[1]))
        if event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__":
            raise SandboxDenied("setting __code__")
        if event == "open" and isinstance(args[0], (str, bytes)):
            path = os.fsdecode(args[0])
            if path.startswith("/proc") or realpath(path).startswith("/proc"):
                raise PermissionError(13, "denied by the sandbox", path)  # what a missing right would give

    sys.addaudithook(hook)


def main():
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(in_fd, "rb") as f:
        cfg = json.loads(f.read())
    token = cfg.pop("token").encode() + b"\n"
    os.set_inheritable(out_fd, False)
    # Taken before the program runs, which may replace any of them.
    write, exit_now, display, exc_info = os.write, os._exit, sys.__excepthook__, sys.exc_info
    streams = (sys.stdout, sys.stderr)
    report = setup(cfg)
    solution, tests = cfg.pop("solution"), cfg.pop("tests")
    module = type(sys)("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module  # the program's globals: nothing of ours is in them
    write(out_fd, b"started " + json.dumps(report).encode() + b"\n")
    neuter_signals()
    guard()
    try:
        exec(compile(solution, "main.py", "exec"), module.__dict__)
        if tests is not None:
            run_check(module.__dict__, tests)
    except BaseException:
        flush(streams)
        display(*exc_info())  # C-level printing: it reads the traceback without the audit hook
        exit_now(1)
    flush(streams)
    write(out_fd, token)  # reached only after check(candidate) returned
    exit_now(0)


def run_check(solution_globals, tests):
    # The tests get a copy of the solution's globals, so no object the solution left there
    # (a __del__, a thread) can replace the task's check before it is called.
    candidate = solution_globals[tests["entry_point"]]
    namespace = dict(solution_globals)
    # Padded so that its line numbers are those of main.py.
    exec(compile("\n" * tests["line"] + tests["source"], "main.py", "exec"), namespace)
    namespace["check"](candidate)


def flush(streams):
    for stream in streams:
        try:
            stream.flush()
        except BaseException:
            pass


main()
'''
