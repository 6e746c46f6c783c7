"""``shared_server``: one server per session, whichever process starts it, stopped by its last user.

Real processes throughout: a tiny TCP server that answers its pid, real ``pytest -n 2`` sessions,
and users in processes of their own that leave, or are SIGKILLed before they can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import shared_server
from processes import wait_for

TESTS = Path(__file__).resolve().parents[1]

# What the servers, the inner sessions and the users in other processes share:
# written into each test's directory.
TINY = textwrap.dedent('''
    import os, socket, subprocess, sys, time
    from pathlib import Path
    from shared_server import Started, shared

    SERVER = """
    import os, socket, time
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    print(sock.getsockname()[1], flush=True)
    deadline = time.monotonic() + 120  # bounded: a test that loses it cannot leave it running
    while time.monotonic() < deadline:
        try:
            conn, _ = sock.accept()
        except socket.timeout:
            continue
        with conn:
            conn.sendall(str(os.getpid()).encode())
    """

    def start(work):
        proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                                start_new_session=True)
        port = int(proc.stdout.readline())
        with open(work / "starts", "a") as f:
            f.write(f"{proc.pid}\\n")
        return Started(proc, {"port": port})

    def ask(port):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            return int(sock.recv(64))

    def hold(directory):
        """A user in a process of its own: joins, says the server's pid, leaves when stdin
        closes."""
        with shared(Path(directory), "tiny", start, timeout_s=30) as info:
            print(ask(info["port"]), flush=True)
            sys.stdin.read()
''')


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "tiny.py").write_text(TINY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def starts(directory: Path) -> list[int]:
    path = directory / "tiny" / "starts"
    return [int(line) for line in path.read_text(encoding="utf-8").split()] if path.exists() else []


def gone(pid: int) -> bool:
    return shared_server.identity(pid) is None


@pytest.fixture
def holder(tiny: Path) -> Iterator[subprocess.Popen[str]]:
    """A user in another process, holding the server it started (or
    joined) until its stdin closes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tiny), str(TESTS)])}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import tiny; tiny.hold({str(tiny)!r})"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def served_pid(holder: subprocess.Popen[str]) -> int:
    assert holder.stdout is not None
    return int(holder.stdout.readline())


INNER = textwrap.dedent("""
    import json, os, time
    import pytest
    import tiny
    from shared_server import session_dir, shared

    @pytest.fixture(scope="session")
    def server(pytestconfig, tmp_path_factory):
        directory = session_dir(pytestconfig, tmp_path_factory)
        with shared(directory, "tiny", tiny.start, timeout_s=30) as info:
            yield info

    @pytest.mark.parametrize("n", range(8))
    def test_asks(server, n, pytestconfig, tmp_path_factory):
        # Until every worker has joined: one that ran all its tests first would stop the server
        # before the other asked (and that one would rightly start it again).
        state = session_dir(pytestconfig, tmp_path_factory) / "tiny.json"
        deadline = time.monotonic() + 30
        while (len(json.loads(state.read_text())["users"]) < int(os.environ["USERS"])
               and time.monotonic() < deadline):
            time.sleep(0.01)
        pid = tiny.ask(server["port"])
        with open(os.environ["ANSWERS"], "a") as f:
            f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {pid}\\n")
""")


@pytest.mark.parametrize("workers", [["-n", "2"], []], ids=["xdist", "serial"])
def test_a_session_starts_its_server_once_and_the_last_user_stops_it(
    pytester: pytest.Pytester, tiny: Path, workers: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(f"import sys\nsys.path[:0] = [{str(tiny)!r}, {str(TESTS)!r}]\n")
    pytester.makepyfile(test_inner=INNER)
    answers, basetemp = pytester.path / "answers", pytester.path / "basetemp"
    monkeypatch.setenv("ANSWERS", str(answers))
    # as a test in a worker of an outer session sees it
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("USERS", "2" if workers else "1")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--basetemp={basetemp}", *workers
    )
    assert result.ret == 0, result.stdout.str()
    seen = [line.split() for line in answers.read_text(encoding="utf-8").splitlines()]
    assert len(seen) == 8
    # under xdist, both workers used it
    assert {who for who, _ in seen} == ({"gw0", "gw1"} if workers else {"gw7"})
    assert (
        starts(basetemp) == [int(pid) for _, pid in seen][:1] and len({pid for _, pid in seen}) == 1
    )
    assert gone(starts(basetemp)[0]) and not (basetemp / "tiny.json").exists()


def test_a_user_leaving_keeps_the_server_for_the_others_and_the_last_stops_one_it_did_not_start(
        tiny: Path, holder: subprocess.Popen[str]) -> None:
    import tiny as module  # noqa: PLC0415 - written by the fixture

    pid = served_pid(holder)  # the other process started it
    with shared_server.shared(tiny, "tiny", module.start, timeout_s=30) as info:
        # joined, not started again
        assert module.ask(info["port"]) == pid and starts(tiny) == [pid]
        # the starter leaves and exits: its server is re-parented
        holder.communicate("", timeout=10)
        assert holder.returncode == 0 and not gone(pid)
        assert module.ask(info["port"]) == pid  # and still serves its last user
    assert gone(pid) and not (tiny / "tiny.json").exists()


def test_a_user_killed_before_it_could_leave_does_not_keep_the_server_up(
        tiny: Path, holder: subprocess.Popen[str]) -> None:
    import tiny as module  # noqa: PLC0415

    pid = served_pid(holder)
    with shared_server.shared(tiny, "tiny", module.start, timeout_s=30):
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert not gone(pid)
    assert gone(pid)  # the dead user was not counted


def test_a_server_that_died_is_started_again_and_only_its_own_users_keep_it_up(
        tiny: Path, holder: subprocess.Popen[str]) -> None:
    import tiny as module  # noqa: PLC0415

    first = served_pid(holder)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: gone(first), seconds=10)
    with shared_server.shared(tiny, "tiny", module.start, timeout_s=30) as info:
        second = module.ask(info["port"])
        assert second != first and starts(tiny) == [first, second]
    assert gone(second)  # the holder was a user of the dead one: it does not hold the new one
    holder.communicate("", timeout=10)
    # and its leaving is harmless
    assert holder.returncode == 0 and not (tiny / "tiny.json").exists()


def test_a_reused_pid_is_not_taken_for_the_process_that_had_it() -> None:
    me = shared_server.identity(os.getpid())
    assert me is not None and shared_server.alive(me)
    # same pid, another start time: another process
    assert not shared_server.alive([me[0], me[1] + 1])
    limit = int(Path("/proc/sys/kernel/pid_max").read_text(encoding="ascii"))
    # a pid no process can have: beyond the kernel's limit
    assert shared_server.identity(limit + 1) is None


MAKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from shared_server import made_once

    def make(path):
        with open(path.parent / "makes", "a") as f:
            f.write("make\\n")
        time.sleep(0.5)  # long enough that the other process asks while this one makes
        (path / "product").write_text("whole")

    print(made_once(Path(sys.argv[1]), "thing", make, timeout_s=30) / "product")
""")


def test_files_made_once_are_made_by_one_process_and_read_whole_by_the_others(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    makers = [
        subprocess.Popen(
            [sys.executable, "-c", MAKER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    products = [m.communicate(timeout=60)[0].strip() for m in makers]
    assert [m.returncode for m in makers] == [0, 0, 0]
    assert (tmp_path / "makes").read_text(encoding="utf-8").split() == ["make"]
    assert {Path(p).read_text(encoding="utf-8") for p in products} == {"whole"}


def test_files_a_failed_make_left_are_made_again_from_nothing(tmp_path: Path) -> None:
    def fails(path: Path) -> None:
        (path / "half").write_text("half")
        raise RuntimeError("the make failed")

    with pytest.raises(RuntimeError, match="the make failed"):
        shared_server.made_once(tmp_path, "thing", fails, timeout_s=30)
    made = shared_server.made_once(
        tmp_path, "thing", lambda path: (path / "whole").write_text("whole"), timeout_s=30
    )
    assert sorted(p.name for p in made.iterdir()) == ["whole"]  # nothing of the failed make
    # made: not made again
    assert shared_server.made_once(tmp_path, "thing", fails, timeout_s=30) == made
