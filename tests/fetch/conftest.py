"""The stand-in hub serving the packaged all-MiniLM-L6-v2, and how a test runs one
`hedgerow fetch-model` process against it (online, with its own HF_HOME)."""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import child_env, hedgerow_command
from tests.fetch.hub import Hub, Repo

REPO = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
NEWER = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_testtokenthatmustneverbelogged"
SERVED = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "vocab.txt", "modules.json", "sentence_bert_config.json",
          "config_sentence_transformers.json", "1_Pooling/config.json"}


@pytest.fixture
def hub(default_model_dir):
    hub = Hub().start()
    hub.repos[REPO] = Repo.from_directory(default_model_dir, COMMIT, branches={"main": COMMIT},
                                          tags={"v1": COMMIT})
    try:
        yield hub
    finally:
        hub.stop()


def fetch_env(hub: Hub, home: Path, token: str | None = None) -> dict[str, str]:
    # Online (child_env is offline for every other test) and nothing of this machine's hub.
    env = {k: v for k, v in child_env().items()
           if not k.startswith("HF_") and k != "TRANSFORMERS_OFFLINE"}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home))
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def fetch_args(tmp_path: Path, repo: str, revision: str, *extra: str) -> list[str]:
    return hedgerow_command("fetch-model", "--repo", repo, "--revision", revision,
                            "--cache", str(tmp_path / "cache"), "--link",
                            str(tmp_path / "link" / "model"), "--message-file",
                            str(tmp_path / "message.json"), *extra)


def fetch(hub: Hub, tmp_path: Path, revision: str = "v1", *extra: str, repo: str = REPO,
          token: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(fetch_args(tmp_path, repo, revision, *extra),
                          env=fetch_env(hub, tmp_path / "hf-home", token), capture_output=True,
                          text=True, timeout=300)
