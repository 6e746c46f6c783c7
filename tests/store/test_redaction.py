"""``redact`` at its boundary: any run of eight characters of a secret is gone from what it returns,
wherever the text is cut, and a text holding no such run is returned as it was."""

from __future__ import annotations

import string
import time

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pytest_echo_bench.providers.secrets import url_secrets
from pytest_echo_bench.store.redaction import MIN_RUN, REDACTED, Secrets, redact

# What a key may hold: printable ASCII without the space (providers.base.read_key refuses the rest),
# the characters JSON, XML and URLs escape included.
KEY_CHARS = "".join(c for c in string.printable if c.isprintable() and c != " ")
MARKER = f"…{REDACTED}"


def pieces(secret: str, text: str) -> list[str]:
    return [
        secret[i : i + MIN_RUN]
        for i in range(len(secret) - MIN_RUN + 1)
        if secret[i : i + MIN_RUN] in text
    ]


def marker_free(secret: str) -> bool:
    """A secret that shares no run with the marker itself
    (``[redacted]`` would then be a piece of it)."""
    return not any(secret[i:i + MIN_RUN] in MARKER for i in range(len(secret) - MIN_RUN + 1))


secrets_st = st.text(KEY_CHARS, min_size=MIN_RUN, max_size=60).flatmap(
    lambda key: st.sampled_from([key, key + "\n", key + "\r\n", " " + key + "\t"]))
around_st = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(secret=secrets_st, before=around_st, after=around_st, partial=st.integers(0, 60))
@example(
    secret="sk-proj-Qm7Zt4Lk9Wx2Rb8Nc5Vd3Hf6Jg1Ps0Ty", before="x" * 179, after="y" * 300, partial=24
)
def test_no_run_survives_any_cut(secret: str, before: str, after: str, partial: int) -> None:
    assume(marker_free(secret))
    # The key whole, a piece of it echoed (a gateway's "sk-proj-Qm7Z..."), and the stripped key.
    text = f"{before}{secret}{after} {secret[:partial]} {secret.strip()}!"
    known = Secrets([secret, secret.strip()])
    for limit in range(0, len(text) + 1):
        for tail in (False, True):
            out = redact(text, known, limit=limit, tail=tail)
            assert len(out) <= limit
            assert not pieces(secret.strip(), out), (limit, tail, out)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(secret=secrets_st, text=around_st)
def test_a_text_without_a_run_is_left_as_it_was(secret: str, text: str) -> None:
    assume(
        not pieces(secret, text)
        and len(secret.strip()) >= MIN_RUN
        and not pieces(secret.strip(), text)
    )
    assert redact(text, [secret, secret.strip()]) == text


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    user=st.text(
        string.ascii_letters + string.digits + "-._~!$&'()*+,;=%", min_size=1, max_size=20
    ),
    password=st.text(
        KEY_CHARS.replace("@", "").replace("/", "").replace("?", "").replace("#", ""),
        min_size=8,
        max_size=30,
    ),
)
def test_a_proxy_urls_credentials_in_every_form_are_secrets(user: str, password: str) -> None:
    from base64 import b64encode
    from urllib.parse import quote, unquote
    url = f"http://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:3128"
    found = set(url_secrets(url))
    pair = f"{unquote(user)}:{unquote(password)}"
    assert {password, pair, b64encode(pair.encode()).decode()} <= found


def test_a_whole_key_shows_its_first_three_characters_and_a_piece_shows_none() -> None:
    key = "sk-proj-PLANTED7c1e0f9a4b2d"
    assert redact(f"Bearer {key}.", [key]) == "Bearer sk-…[redacted]."
    assert redact(f"key {key[:14]}... refused", [key]) == "key [redacted]... refused"
    assert redact(f"{key}{key}", [key]) == REDACTED  # two side by side are one run


def test_a_short_value_is_redacted_only_where_it_stands_alone() -> None:
    assert (
        redact("user alice: bad password; malice", ["alice"])
        == "user [redacted]: bad password; malice"
    )
    assert redact("abc", ["abc"]) == "abc"  # under four characters: no key


def test_the_cut_keeps_the_head_or_the_tail_of_the_redacted_text() -> None:
    key = "K3y-" + "q" * 30
    text = "a" * 10 + key + "b" * 10
    assert redact(text, [key]) == "a" * 10 + "K3y…[redacted]" + "b" * 10
    assert redact(text, [key], limit=15) == "a" * 10 + "K3y…["
    assert redact(text, [key], limit=12, tail=True) == "d]" + "b" * 10


def test_a_tail_of_nothing_is_nothing() -> None:
    # Found by the property above: text[-0:] is the whole text, key included.
    assert redact("sk-proj-Qm7Zt4Lk9Wx2", ["sk-proj-Qm7Zt4Lk9Wx2"], limit=0, tail=True) == ""


def test_the_secrets_are_never_in_its_repr() -> None:
    assert "hunter2hunter2" not in repr(Secrets(["hunter2hunter2"]))


def test_a_two_thousand_character_tail_and_a_few_keys_take_a_fraction_of_a_millisecond() -> None:
    # Measured: ~0.12 ms for three 51-character keys and three proxy forms (docs/reliability.md);
    # the bound only catches a quadratic scan, not a slow machine.
    keys = [f"sk-{n}" + "Zq8Wm2Kx7Lp4Rt9Vb3Nc6Hd1Jf5Gs0Ty" * 2 for n in range(3)] + [
        "proxy-user",
        "pr0xy-s3cret",
        "cHJveHk6cHIweHk=",
    ]
    known = Secrets(keys)
    text = (string.printable * 30)[:1000] + keys[0] + (string.printable * 30)[:1000]
    start = time.perf_counter()
    for _ in range(200):
        out = redact(text, known, limit=2000, tail=True)
    assert (time.perf_counter() - start) / 200 < 0.02
    assert keys[0][3:11] not in out
