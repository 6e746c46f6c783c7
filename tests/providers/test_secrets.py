"""What a spec's texts must never show, read from the spec and the
environment (``providers.secrets``)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from pytest_echo_bench.providers.secrets import spec_secrets
from pytest_echo_bench.spec.load import load_spec

SPEC = """benchmark: demo
dataset: {loader: inline, items: [{id: q0, input: '2+2', target: '4'}]}
scorer: exact
arms:
  chat:
    provider: openai
    model: ${MODEL_NAME}
    base_url: http://gw-user:gw-pass-77aa@127.0.0.1:9/v1?api-version=2024-06-01&key=qk-0f9e8d7c6b
    api_key_env: SPEC_KEY
    proxy: http://px-user:px-secret-31@127.0.0.1:3128
    extra_body: {tag: '${GATEWAY_TAG}', n: '${SMALL:-1}', data: '${DATA_DIR}', rel: '${REL_DIR}'}
  cli: {provider: command, argv: [cli], env: [CLI_TOKEN]}
"""


def test_every_secret_a_spec_names_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "MODEL_NAME": "gpt-4o-mini-2024",
        "GATEWAY_TAG": "tag-4b3a2918",
        "SPEC_KEY": "sk-spec-1234567890abcdef\n",
        "CLI_TOKEN": "cli-tok-5566778899",
        "SMALL": "3",
        "HTTPS_PROXY": "http://env-user:env-pass-99@proxy:8080",
        "DATA_DIR": "/srv/data/mmlu-pro",
        "REL_DIR": "data-folder",
    }
    (tmp_path / "data-folder").mkdir()
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "demo.yaml").write_text(SPEC)
    values = spec_secrets(load_spec(tmp_path / "demo.yaml")).values
    for secret in (
        "sk-spec-1234567890abcdef",
        "sk-spec-1234567890abcdef\n",
        "cli-tok-5566778899",
        "tag-4b3a2918",
        "gpt-4o-mini-2024",
        "gw-user",
        "gw-pass-77aa",
        "qk-0f9e8d7c6b",
        "px-user",
        "px-secret-31",
        base64.b64encode(b"px-user:px-secret-31").decode(),
        "env-pass-99",
        base64.b64encode(b"env-user:env-pass-99").decode(),
    ):
        assert secret in values, secret
    # Settings, not secrets: a short value, a default written in the
    # spec, a query's api-version, paths.
    assert not {"3", "1", "2024-06-01", "/srv/data/mmlu-pro", "data-folder"} & values
