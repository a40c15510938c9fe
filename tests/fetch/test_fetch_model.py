"""`hedgerow fetch-model` for real: the real huggingface_hub client (snapshot_download and
the API calls around it) against a stand-in hub on loopback (tests/fetch/hub.py) serving the
packaged all-MiniLM-L6-v2's files. Each fetch is its own `hedgerow` process, as in a pod's
init container; what it leaves in the cache, its log and its message file are checked.
"""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hedgerow import model_source
from tests.fetch.conftest import (
    COMMIT, NEWER, REPO, SERVED, TOKEN, fetch, fetch_args, fetch_env,
)
from tests.fetch.hub import Repo

pytestmark = pytest.mark.slow


def _message(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "message.json").read_text())


def _model_dirs(tmp_path: Path) -> list[Path]:
    """Every complete model directory in the cache."""
    return sorted(p.parent for p in (tmp_path / "cache").glob(f"*/*/*/{model_source.SOURCE_FILE}"))


def _nothing_kept(tmp_path: Path) -> None:
    assert _model_dirs(tmp_path) == []
    assert not [p for p in (tmp_path / "cache").glob("*/*") if not p.name.endswith(".lock")
                and p.parent.name != ".locks"], "a partial model was left in the cache"
    assert not (tmp_path / "link" / "model").exists()


def test_a_tag_is_fetched_verified_and_linked_and_a_second_fetch_does_not_download(
        hub, tmp_path, default_model_dir):
    first = fetch(hub, tmp_path, "v1")
    assert first.returncode == 0, first.stderr
    link = tmp_path / "link" / "model"
    directory = link.resolve()
    assert _model_dirs(tmp_path) == [directory]
    assert directory.name == "all-MiniLM-L6-v2"  # what the server reports as the model's name
    fetched = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    # The default patterns: no README, no data_config.json, no .gitattributes.
    assert fetched == SERVED | {model_source.SOURCE_FILE}
    for path in SERVED:
        assert (directory / path).read_bytes() == (default_model_dir / path).read_bytes()
    source = model_source.read(link)
    assert (source.repo, source.revision, source.commit) == (REPO, "v1", COMMIT)
    assert source.files["model.safetensors"].startswith("sha256:")
    assert source.files["config.json"].startswith("git-sha1:")
    assert _message(tmp_path) == {"ok": True, "repo": REPO, "revision": "v1", "commit": COMMIT,
                                  "downloaded": True, "files": len(SERVED),
                                  "bytes": sum((default_model_dir / p).stat().st_size
                                               for p in SERVED)}
    total = _message(tmp_path)["bytes"]
    assert f"event=fetch.progress bytes_done={total} bytes_total={total}" in first.stderr
    assert hub.downloads("model.safetensors") == 1

    # A second pod on the same cache volume, the revision a commit: no request at all.
    asked = len(hub.requests)
    second = fetch(hub, tmp_path, COMMIT)
    assert second.returncode == 0, second.stderr
    assert "event=fetch.cached" in second.stderr and "downloaded=False" in second.stderr
    assert _message(tmp_path)["downloaded"] is False
    assert link.resolve() == directory
    assert len(hub.requests) == asked, hub.requests[asked:]
    # The tag again: resolved with the API, nothing downloaded.
    third = fetch(hub, tmp_path, "v1")
    assert third.returncode == 0 and "downloaded=False" in third.stderr, third.stderr
    assert not [url for _, url in hub.requests[asked:] if "/resolve/" in url]


def test_a_tampered_file_is_refused_and_nothing_is_kept(hub, tmp_path):
    data = bytearray(hub.repos[REPO].files["model.safetensors"])
    data[len(data) // 2] ^= 0xFF  # same size: only the digest can tell
    hub.repos[REPO].tamper["model.safetensors"] = bytes(data)
    result = fetch(hub, tmp_path, "v1")
    assert result.returncode == 2
    assert "model.safetensors: sha256 " in result.stderr
    assert "the hub lists" in result.stderr and "nothing was kept" in result.stderr
    _nothing_kept(tmp_path)
    message = _message(tmp_path)
    assert message["ok"] is False and "model.safetensors: sha256" in message["error"]
    # Once the hub serves the right bytes, the next fetch downloads and verifies them.
    hub.repos[REPO].tamper.clear()
    assert fetch(hub, tmp_path, "v1").returncode == 0


def test_a_private_model_needs_a_valid_token_which_is_never_logged(hub, tmp_path,
                                                                   default_model_dir):
    hub.repos["acme/private-minilm"] = Repo.from_directory(default_model_dir, COMMIT,
                                                           token=TOKEN)
    missing = fetch(hub, tmp_path, COMMIT, repo="acme/private-minilm")
    assert missing.returncode == 2
    assert "was not found on" in missing.stderr and "without a token" in missing.stderr
    assert "tokenSecret" in missing.stderr
    _nothing_kept(tmp_path)

    wrong = fetch(hub, tmp_path, COMMIT, repo="acme/private-minilm",
                  token="not-a-token-" + TOKEN[3:])
    assert wrong.returncode == 2
    assert "HTTP 401" in wrong.stderr and "with the token given" in wrong.stderr
    assert "give a valid token" in wrong.stderr
    _nothing_kept(tmp_path)

    good = fetch(hub, tmp_path, COMMIT, "--log-level", "debug", repo="acme/private-minilm",
                 token=TOKEN)
    assert good.returncode == 0, good.stderr
    for result in (missing, wrong, good):
        assert TOKEN[3:] not in result.stdout + result.stderr
    assert TOKEN[3:] not in (tmp_path / "message.json").read_text()


def test_a_gated_model_says_so(hub, tmp_path, default_model_dir):
    hub.repos["acme/gated-minilm"] = Repo.from_directory(default_model_dir, COMMIT,
                                                         token=TOKEN, gated=True)
    result = fetch(hub, tmp_path, COMMIT, repo="acme/gated-minilm")
    assert result.returncode == 2
    assert "acme/gated-minilm is gated: accept its conditions" in result.stderr
    assert "without a token" in result.stderr


@pytest.mark.parametrize("repo, revision, expected", [
    ("acme/no-such-model", "v1", "acme/no-such-model was not found on"),
    (REPO, "v9", "revision 'v9' is not a branch, tag or commit of " + REPO),
    (REPO, NEWER, f"revision '{NEWER}' is not a branch, tag or commit of " + REPO),
    (REPO, "main", "revision 'main' of " + REPO + " is a branch, which moves (it is at commit "
     + COMMIT),
    ("acme/--bad", "v1", "--repo: 'acme/--bad' is not a repository id"),
    ("acme/a--b", COMMIT, "'acme/a--b' is not a Hugging Face repository id"),
])
def test_what_cannot_be_fetched_is_named(hub, tmp_path, repo, revision, expected):
    result = fetch(hub, tmp_path, revision, repo=repo)
    assert result.returncode == 2
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()[-1]) < 600
    _nothing_kept(tmp_path)


def test_a_branch_is_fetched_only_when_a_moving_revision_is_allowed(hub, tmp_path):
    result = fetch(hub, tmp_path, "main", "--allow-moving-revision")
    assert result.returncode == 0, result.stderr
    assert _message(tmp_path)["commit"] == COMMIT
    # The branch moves: the next fetch takes the new commit, in a directory of its own.
    hub.repos[REPO].branches["main"] = NEWER
    hub.repos[REPO].commit = NEWER
    moved = fetch(hub, tmp_path, "main", "--allow-moving-revision")
    assert moved.returncode == 0, moved.stderr
    assert _message(tmp_path)["commit"] == NEWER
    assert [p.parent.name[:40] for p in _model_dirs(tmp_path)] == sorted([COMMIT, NEWER])
    assert model_source.read(tmp_path / "link" / "model").commit == NEWER


def test_a_model_over_the_size_limit_is_refused_before_any_download(hub, tmp_path):
    result = fetch(hub, tmp_path, "v1", "--max-bytes", "1000000")
    assert result.returncode == 2
    assert "more than the cache's limit of 1000000 bytes" in result.stderr
    assert "cache.sizeLimit" in result.stderr
    assert not [url for _, url in hub.requests if "/resolve/" in url]
    _nothing_kept(tmp_path)


def test_a_gateway_fetch_leaves_the_weights_out_unless_the_cache_has_them(hub, tmp_path):
    alone = tmp_path / "gateway-only"
    light = fetch(hub, alone, "v1", "--skip-weights")
    assert light.returncode == 0, light.stderr
    files = {p.name for p in (alone / "link" / "model").iterdir()}
    assert "model.safetensors" not in files and {"tokenizer.json", "config.json"} <= files
    assert hub.downloads("model.safetensors") == 0
    # On a cache where a server fetched the model, a gateway uses that directory as it is.
    shared = tmp_path / "shared"
    full = fetch(hub, shared, "v1")
    assert full.returncode == 0, full.stderr
    assert hub.downloads("model.safetensors") == 1
    asked = len(hub.requests)
    again = fetch(hub, shared, COMMIT, "--skip-weights")
    assert again.returncode == 0 and "downloaded=False" in again.stderr, again.stderr
    assert (shared / "link" / "model" / "model.safetensors").is_file()
    assert len(hub.requests) == asked


def test_a_cache_that_cannot_be_written_is_named(hub, tmp_path):
    (tmp_path / "cache").write_text("a file, not a directory")
    result = fetch(hub, tmp_path, COMMIT)
    assert result.returncode == 2
    assert f"cannot write into the cache at {tmp_path / 'cache'}" in result.stderr
    assert "Traceback" not in result.stderr


def test_patterns_that_select_nothing_servable_are_refused(hub, tmp_path):
    result = fetch(hub, tmp_path, "v1", "--allow-patterns", "README.md,*.txt")
    assert result.returncode == 2
    assert "has no config.json, tokenizer.json, *.safetensors" in result.stderr
    assert "README.md, vocab.txt" in result.stderr
    _nothing_kept(tmp_path)


def _wait_for(what: str, probe, timeout: float = 120.0):
    """Poll `probe` until truthy; a generous bound on a loaded machine, not a measurement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_pods_on_one_cache_download_once(hub, tmp_path):
    """The first fetch's weights download is held open until the second fetch is waiting on
    the lock; then both finish, from one download."""
    release = hub.hold("model.safetensors")
    env = fetch_env(hub, tmp_path / "hf-home")
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    procs = []
    try:
        with logs[0].open("w") as log:
            procs.append(subprocess.Popen(fetch_args(tmp_path, REPO, "v1", "--progress-interval",
                                                "0.1"), env=env, stderr=log,
                                          stdout=subprocess.DEVNULL))
        _wait_for("the first download to reach the weights", lambda: hub.waiting)
        # While the weights are held, the first fetch reports how far it is: past the small
        # files, short of the total (its first lines may come before any byte arrived).
        def partial_progress():
            lines = re.findall(r"event=fetch.progress bytes_done=(\d+) bytes_total=(\d+)",
                               logs[0].read_text())
            return next(((int(d), int(t)) for d, t in lines if int(d) > 0), None)

        done, total = _wait_for("a progress line past zero bytes", partial_progress)
        assert 0 < done < total
        with logs[1].open("w") as log:
            procs.append(subprocess.Popen(fetch_args(tmp_path, REPO, "v1"), env=env, stderr=log,
                                          stdout=subprocess.DEVNULL))
        _wait_for("the second fetch to wait on the lock",
                  lambda: "event=fetch.waiting" in logs[1].read_text())
        release.set()
        assert [proc.wait(timeout=300) for proc in procs] == [0, 0], \
            [path.read_text()[-2000:] for path in logs]
    finally:
        release.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert hub.downloads("model.safetensors") == 1
    second = logs[1].read_text()
    assert "another process fetched it while this one waited" in second
    assert "downloaded=False" in second
    assert len(_model_dirs(tmp_path)) == 1


def _in_small_filesystems(cache: Path, cache_size: str, incoming_size: str | None) -> list[str]:
    """argv prefix: run the command in a mount namespace where `cache` is a tmpfs of
    `cache_size` (and its staging area, with `incoming_size`, another: room to start, none to
    finish), then print what is left in the cache besides the lock files and the staging
    directory itself (the tmpfs goes with the namespace)."""
    script = f"mount -t tmpfs -o size={cache_size} tmpfs {cache}"
    if incoming_size:
        script += (f" && mkdir {cache}/.incoming && mount -t tmpfs -o size={incoming_size} "
                   f"tmpfs {cache}/.incoming")
    script += (f' && {{ "$@"; rc=$?; cd {cache} && find . -mindepth 1 -not -path "./.locks*" '
               '-not -path ./.incoming -print; exit $rc; }')
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]


def _namespaces_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(_in_small_filesystems(tmp_path, "1m", None) + ["true"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("incoming, expected", [
    (None, "has too little room: the model needs"),
    ("20m", "ran out of room during the download"),
])
def test_a_full_disk_is_named_and_leaves_no_partial_model(hub, tmp_path, incoming, expected):
    if not _namespaces_work(tmp_path):
        pytest.skip("needs unshare and user namespaces to mount a small tmpfs")
    cache = tmp_path / "cache"
    cache.mkdir()
    argv = _in_small_filesystems(cache, "200m" if incoming else "50m", incoming)
    result = subprocess.run(argv + fetch_args(tmp_path, REPO, COMMIT),
                            env=fetch_env(hub, tmp_path / "hf-home"), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "a larger sizeLimit or PVC" in result.stderr
    assert result.stdout.split() == [], "a partial model was left in the cache"
    assert not (tmp_path / "link" / "model").exists()
