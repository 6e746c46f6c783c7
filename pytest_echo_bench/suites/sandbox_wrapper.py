"""The harness inside the sandbox: it drops privileges, loads the completion and answers calls.

``WRAPPER`` is run as ``python -I -c WRAPPER <in_fd> <request_fd> <reply_fd>``. It reads its
settings (the prompt and the completion, never the tests nor the canonical solution) from
``in_fd``, a file only it was given, sets itself up, and sends ``("ready", report)`` on
``reply_fd`` before any line of the completion runs: a missing ``ready`` is what "the sandbox did
not start" means. Then it executes the completion as ``__main__`` and replies ``("loaded",)`` or
``("load-error", type, text)``. Serving, it reads ``("call", args, kwargs)`` frames from
``request_fd`` and answers each with ``("return", value)``, ``("raise", type, text)``,
``("exit", type, text)`` (``SystemExit`` and the like) or ``("refused", why)`` when the value is
not plain data (``suites/codec.py``, whose source it is given and executes).

Nothing here needs defending from the completion: it shares this process, so it can replace any
of it, but all it could do with that is send other bytes, which the trusted side decodes as
hostile data. The verdict is earned there (``suites/check_side.py``).
"""

from __future__ import annotations

WRAPPER = r'''
import json, os, resource, sys


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
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    return {"uid": os.getuid(), "workdir": workdir}


def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def send(fd, payload):
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def text_of(exc):
    try:
        return str(exc)[:2000]
    except BaseException:
        return "(its text could not be read)"


def reply_to(func, codec, args, kwargs):
    try:
        result = func(*args, **kwargs)
    except Exception as exc:
        message = ("raise", type(exc).__name__, text_of(exc))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: the call ended the program
        message = ("exit", type(exc).__name__, text_of(exc))
    else:
        message = ("return", result)
    try:
        return codec["encode"](message)
    except codec["CodecError"] as exc:
        return codec["encode"](("refused", str(exc)))


def serve(func, codec, request_fd, reply_fd):
    frame = codec["frame"]
    while True:
        head = read_exact(request_fd, 4)
        if head is None:
            return  # the trusted side is done
        body = read_exact(request_fd, codec["frame_length"](head))
        _, args, kwargs = codec["decode"](body)
        send(reply_fd, frame(reply_to(func, codec, args, kwargs)))


def main():
    in_fd, request_fd, reply_fd = map(int, sys.argv[1:4])
    with os.fdopen(in_fd, "rb") as f:
        cfg = json.loads(f.read())
    codec = {"__name__": "codec"}
    exec(compile(cfg.pop("codec"), "codec.py", "exec"), codec)
    for fd in (request_fd, reply_fd):
        os.set_inheritable(fd, False)  # the completion's children get neither end
    report = setup(cfg)
    send(reply_fd, codec["frame"](codec["encode"](("ready", report))))
    module = type(sys)("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module  # the completion's globals: nothing of ours is in them
    # the hook is taken before the completion may replace it
    entry, display = cfg["entry_point"], sys.__excepthook__
    try:
        exec(compile(cfg["solution"], "main.py", "exec"), module.__dict__)
        func = module.__dict__.get(entry) if entry else None
        if entry and not callable(func):
            raise NameError(f"the completion defines no function {entry}()")
    except BaseException as exc:
        failure = ("load-error", type(exc).__name__, text_of(exc))
        send(reply_fd, codec["frame"](codec["encode"](failure)))
        flush()
        display(type(exc), exc, exc.__traceback__)
        os._exit(1)
    send(reply_fd, codec["frame"](codec["encode"](("loaded",))))
    if entry:
        serve(func, codec, request_fd, reply_fd)
    flush()
    os._exit(0)


def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


main()
'''
