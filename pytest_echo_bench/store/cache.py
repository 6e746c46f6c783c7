"""The response cache: one SQLite file (WAL mode) shared by every process of a sweep.

Keyed by (provider, model and parameters, prompt, sample index, epoch), so a composite arm's first
call to a sub-arm reuses the answer that sub-arm gave as an arm of its own, and a re-run of a
finished sweep costs nothing. Which arms' answers are cached is the caller's to say: a provider
declares it (``providers.base.ProviderInfo.cacheable``), and this room sits below the providers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, text TEXT NOT NULL, usage TEXT)"
)
# What the reply said served it, added to a cache file made before these columns (NULL in its
# older answers: their served model is unknown, never guessed). A reader of the older layout
# selects and inserts by column name, so it still reads and writes the file.
_SERVED = ("served_model", "served_fingerprint")


@dataclass(frozen=True)
class Cached:
    """A stored answer: its text, usage, and the served model and fingerprint its reply gave."""

    text: str
    usage: dict[str, int] | None
    model: str | None = None
    fingerprint: str | None = None


def cache_key(call: dict[str, Any], prompt: str, sample: int, epoch: int = 1) -> str:
    """Epoch 1 keys as a spec without epochs does (its answers are shared); every other epoch is a
    sample of its own, and within it a composite arm's repeated asks still count ``sample``."""
    parts: list[Any] = (
        [call, prompt, sample] if epoch == 1 else [call, prompt, sample, {"epoch": epoch}]
    )
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """One connection per calling thread, each closed by ``close``.

    A connection holds three descriptors (the file, its WAL and shared memory) and sits in a
    reference cycle of its own, so neither a thread's end nor dropping the cache closes it: only
    the cycle collector did, long after the run (a session of in-process runs held dozens).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            with self._lock:
                # a call still in flight after the run's end: a miss, not a new connection
                if self._closed:
                    raise sqlite3.ProgrammingError("the response cache is closed")
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Used by its own thread only; ``close`` may close it from
                # another once the calls are done.
                db = sqlite3.connect(
                    self.path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
                self._opened.append(db)
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            _add_served(db)
            self._local.db = db
        return db

    def close(self) -> None:
        """Close every thread's connection (idempotent). A call still
        in flight then misses the cache."""
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, []
        for db in opened:
            db.close()

    def get(self, key: str) -> Cached | None:
        """The stored answer, or None: a broken cache costs a call, never a result."""
        try:
            row = (
                self._db()
                .execute("SELECT text, usage, served_model, served_fingerprint FROM responses"
                         " WHERE key = ?", (key,))
                .fetchone()
            )
        except sqlite3.Error:
            return None  # a broken cache costs a call, never a result
        if row is None:
            return None
        return Cached(row[0], json.loads(row[1]) if row[1] else None, _text(row[2]), _text(row[3]))

    def put(self, key: str, text: str, usage: dict[str, int] | None, model: str | None = None,
            fingerprint: str | None = None) -> None:
        try:
            self._db().execute(
                "INSERT OR IGNORE INTO responses (key, text, usage, served_model,"
                " served_fingerprint) VALUES (?, ?, ?, ?, ?)",
                (key, text, json.dumps(usage) if usage else None, model, fingerprint),
            )
        except (sqlite3.Error, UnicodeEncodeError):
            # best effort: the row is what matters (SQLite stores no lone
            # surrogate: such a text is not cached)
            pass

    def forget(self, key: str) -> None:
        """Drop the answer stored under ``key``: a judge's reply that gave no grade, so the retry
        of its item asks the judge again instead of reading the same reply."""
        try:
            self._db().execute("DELETE FROM responses WHERE key = ?", (key,))
        except sqlite3.Error:
            pass  # best effort: the retry then reads the same reply, and stays unjudged


def _add_served(db: sqlite3.Connection) -> None:
    """The served columns, added to a file made without them. Another process may add them
    first ("duplicate column": the same outcome); a file that cannot be changed (read only)
    then misses every lookup: a broken cache costs calls, never a result."""
    have = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
    for column in _SERVED:
        if column not in have:
            with contextlib.suppress(sqlite3.OperationalError):
                db.execute(f"ALTER TABLE responses ADD COLUMN {column} TEXT")


def _text(value: object) -> str | None:
    """A stored served model or fingerprint (any other value, from a file edited by hand: none)."""
    return value if isinstance(value, str) and value else None


def peek(path: Path, keys: list[str]) -> dict[str, dict[str, int] | None]:
    """The usage of every key of ``keys`` the cache at ``path`` holds, read only: nothing is created
    or written (``echo-bench estimate`` plans a run; it must not leave a cache where none was). A
    missing or broken cache holds nothing."""
    return {key: _usage(usage) for key, usage in _peek(path, keys, "usage").items()}


def peek_texts(path: Path, keys: list[str]) -> dict[str, str]:
    """The reply text of every key of ``keys`` the cache at ``path`` holds, read only as ``peek``
    (the estimate renders a judge's prompt from an answer the cache holds)."""
    return {key: text for key, text in _peek(path, keys, "text").items() if isinstance(text, str)}


def _peek(path: Path, keys: list[str], column: str) -> dict[str, Any]:
    """``column`` (``usage`` or ``text``) of every key of ``keys`` the cache holds, read only."""
    if not keys or not path.is_file():
        return {}
    found: dict[str, Any] = {}
    try:
        # A WAL database opened even read-only makes its -shm and -wal files: without a -wal
        # beside it, immutable=1 reads it as a plain file and creates nothing. With one (a
        # run writing now, or not closed), replies may be only in it: read-only mode reads
        # them, and the files exist already.
        wal = path.with_name(path.name + "-wal").exists()
        db = sqlite3.connect(
            f"{path.resolve().as_uri()}?{'mode=ro' if wal else 'immutable=1'}",
            uri=True,
            timeout=5.0,
        )
        try:
            for start in range(0, len(keys), 500):  # SQLite allows 999 parameters a statement
                chunk = keys[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value in db.execute(
                    f"SELECT key, {column} FROM responses WHERE key IN ({marks})", chunk
                ):
                    found[key] = value
        finally:
            db.close()
    except sqlite3.Error:
        return {}
    return found


def _usage(blob: str | None) -> dict[str, int] | None:
    try:
        data = json.loads(blob) if blob else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {k: v for k, v in data.items() if isinstance(k, str) and type(v) is int and v >= 0}
