"""A fetched model serves, and its commit is part of its embedding space: the packaged
all-MiniLM-L6-v2 and the same files fetched at two commits are three spaces with the same
probe vectors (the facts part of the fingerprint tells them apart, the probe part agrees).
The fingerprints come from `hedgerow guard record`, which measures a space as a server does.
"""

import json
import subprocess

import pytest

from hedgerow import golden_set
from tests.conftest import child_env, hedgerow_command
from tests.fetch.conftest import COMMIT, NEWER, REPO, fetch

pytestmark = pytest.mark.slow


def _fingerprint(model) -> str:
    done = subprocess.run(hedgerow_command("guard", "record", "--fingerprint-only", "--model",
                                           str(model)),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    return golden_set.parse(manifest["data"][golden_set.CONFIG_MAP_KEY]).fingerprint


def test_a_fetched_revision_is_a_space_of_its_own(hub, tmp_path, default_model_dir):
    links = {}
    for commit in (COMMIT, NEWER):
        hub.repos[REPO].commit = commit
        where = tmp_path / commit[:8]
        result = fetch(hub, where, commit)
        assert result.returncode == 0, result.stderr
        links[commit] = where / "link" / "model"
    packaged = _fingerprint(default_model_dir)
    first, second = _fingerprint(links[COMMIT]), _fingerprint(links[NEWER])
    facts = {fp.split("-")[1] for fp in (packaged, first, second)}
    probes = {fp.split("-")[2] for fp in (packaged, first, second)}
    assert len(facts) == 3, (packaged, first, second)
    assert len(probes) == 1, "the same weights give the same vectors"
    assert _fingerprint(links[COMMIT]) == first  # and the fact is stable
