"""Fixtures for the wheel's tests: shards of the bundled sample made through the wheel itself
(`bertpipe.pipeline_run`), once per session."""

import os
import pathlib
import shutil

import pytest

import bertpipe

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def imdb(tmp_path_factory):
    """Classification shards of the sample (pipelines/imdb.yaml)."""
    out = tmp_path_factory.mktemp("shards") / "imdb"
    bertpipe.pipeline_run(REPO / "pipelines/imdb.yaml", [f"sink.path={out}"], overwrite=True)
    return out


@pytest.fixture(scope="session")
def pretrain(tmp_path_factory):
    """MLM + NSP shards of the sample, masked at training time (dynamic), the rate left to
    the trainer (no masked_lm_prob)."""
    out = tmp_path_factory.mktemp("shards") / "pretrain"
    bertpipe.pipeline_run(
        REPO / "pipelines/imdb-pretrain.yaml",
        [f"sink.path={out}", "steps[7].masking=dynamic", "steps[7].masked_lm_prob=null"],
        overwrite=True,
    )
    return out


@pytest.fixture(scope="session")
def command():
    """The `bertpipe` command the wheel installed."""
    path = shutil.which("bertpipe")
    assert path, "the wheel's `bertpipe` command is not on PATH"
    return path


@pytest.fixture(autouse=True)
def _no_rank_variables(monkeypatch):
    # A test's share is what it says, not what the environment it runs in says.
    for var in list(os.environ):
        if var in ("RANK", "WORLD_SIZE", "LOCAL_RANK") or var.startswith(("OMPI_COMM_WORLD_", "PMI_", "SLURM_")):
            monkeypatch.delenv(var, raising=False)
    yield
