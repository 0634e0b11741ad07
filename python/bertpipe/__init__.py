"""bertpipe from Python: the shards of `bertpipe pipeline run` for PyTorch with the trainer's
order, masks, shares and resume (`ShardDataset`), the same shards as an HF `datasets.Dataset`
(`to_hf_dataset`), and the pipeline and `stats` as calls for notebooks.

Everything here calls bertpipe's Rust library (`bertpipe._native`); the `bertpipe` command the
wheel installs is the same program as the Cargo-built one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence, Union

from . import _native
from ._native import BertpipeError, __version__

__all__ = [
    "BertpipeError",
    "Collator",
    "ShardDataset",
    "pipeline_run",
    "stats",
    "to_hf_dataset",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


def __getattr__(name: str):
    # ShardDataset and Collator import torch, which takes seconds: only when asked for, so the
    # `bertpipe` command (which imports this package) starts as fast as the binary.
    if name in ("ShardDataset", "Collator"):
        from . import dataset

        return getattr(dataset, name)
    raise AttributeError(f"module 'bertpipe' has no attribute {name!r}")


def pipeline_run(
    pipeline: PathLike,
    overrides: Sequence[str] = (),
    *,
    threads: int = 0,
    overwrite: bool = False,
    resume: bool = False,
    quiet: bool = False,
) -> Dict[str, Any]:
    """`bertpipe pipeline run PIPELINE --set K=V …`: runs the pipeline in this process and
    returns what it wrote: `out` (the shard folder), `manifest` (its manifest.json as a dict),
    `seconds`, `text_bytes`, `peak_rss_bytes`, `found` (what the source found by itself).
    Its progress goes to stderr as the command's does (a bar, or lines in a log) unless `quiet`.
    A configuration error raises BertpipeError with every problem, located."""
    if isinstance(overrides, str):
        overrides = [overrides]
    return json.loads(
        _native.pipeline_run(os.fspath(pipeline), list(overrides), threads, overwrite, resume, quiet)
    )


def stats(
    path: PathLike,
    *,
    by: Optional[str] = None,
    overrides: Sequence[str] = (),
    threads: int = 0,
    quiet: bool = True,
) -> Dict[str, Any]:
    """`bertpipe stats PATH --json` as a dict: a corpus folder, a pipeline file or a shard
    folder; `by` groups by `label` or `split`."""
    if isinstance(overrides, str):
        overrides = [overrides]
    return json.loads(_native.stats(os.fspath(path), by, list(overrides), threads, quiet))


def to_hf_dataset(path: PathLike, split: str = "train"):
    """The split's shards as a `datasets.Dataset` (memory-mapped Arrow, as
    `load_dataset("parquet", …)` makes), after bertpipe has checked them against their
    manifest; a classification split's `label` is a `ClassLabel` with the manifest's names."""
    try:
        import datasets
    except ImportError:
        raise ImportError("to_hf_dataset needs the `datasets` package: pip install datasets") from None
    files, names, task = _native.shard_files(os.fspath(path), split)
    if not files:
        raise BertpipeError(f"split `{split}` of '{os.fspath(path)}' has no shards: the pipeline kept no row of it")
    ds = datasets.Dataset.from_parquet([os.fspath(f) for f in files], split=split)
    if task == "classify" and names and "label" in ds.column_names:
        ds = ds.cast_column("label", datasets.ClassLabel(names=list(names)))
    return ds
