"""`ShardDataset`: bertpipe's shards for PyTorch, with the trainer's guarantees.

The rows come from bertpipe's library (`bertpipe._native.Rows`, over `bertpipe::train::rows`):
the manifest and every shard's checksum verified, the split read in the order `bertpipe train`
draws for the same seed (its length-grouped batches with `group_by_length=True`, as the
train YAML's default; the plain permutation otherwise), pretraining rows masked by the
trainer's own `MaskSpec::mask` — the same masks for the same seed, epoch and row.

**Ranks.** An epoch's order is cut into global batches of `batch_size × world_size` rows; rank
`r` takes the `r`-th contiguous part of each, as `mpirun -n world_size bertpipe train` with
`per_device_train_batch_size × gradient_accumulation_steps = batch_size` does. So that every rank gets the same number of rows
(DDP hangs when one rank runs a step more), each rank takes `⌊s / world_size⌋` rows of its part
of the epoch's last, short global batch of `s` rows: `s % world_size` rows are left out, other
rows every epoch, as the order is reshuffled.

**Workers.** A rank's share is cut into blocks of `batch_size` rows; DataLoader workers take
blocks in turn (worker `j` of `W`: blocks `j, j + W, …`). With the DataLoader's `batch_size`
equal to the dataset's, the loader yields the share in the order one process does.

**Resume.** `state_dict()` says how far the iteration got; `load_state_dict()` continues from
there, without replaying a row. Without workers the dataset counts the rows it gave. With
workers, use torchdata's `StatefulDataLoader` (it keeps each worker's state), or say how many
rows the training loop consumed: `state_dict(consumed=steps * batch_size)` — the workers then
take blocks in turn from the first one not consumed, so the plain DataLoader goes on in order.
"""

from __future__ import annotations

import numbers
import warnings
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _native

try:  # torch is optional: without it the dataset is a plain iterable.
    import torch
    from torch.utils.data import IterableDataset as _Base
    from torch.utils.data import get_worker_info as _worker_info
except ImportError:  # pragma: no cover - exercised by the no-torch test
    torch = None
    _Base = object

    def _worker_info():
        return None


# Rows fetched from the native reader per call.
_FETCH = 256
_FORMAT = "bertpipe.ShardDataset/1"


def _rank_and_world(rank: Optional[int], world_size: Optional[int]):
    """The arguments, else torch.distributed, else a launcher's variables (mpirun's
    OMPI_COMM_WORLD_*, srun's SLURM_PROCID/SLURM_STEP_NUM_TASKS, torchrun's RANK/WORLD_SIZE,
    read as `bertpipe train` reads them), else 0 of 1."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ValueError("give both rank and world_size, or neither")
        r, w, whence = _whole("rank", rank, 0), _whole("world_size", world_size, 1), "the arguments"
    elif torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        r, w, whence = torch.distributed.get_rank(), torch.distributed.get_world_size(), "torch.distributed"
    else:
        try:
            found = _native.launcher_world()
        except _native.BertpipeError as e:
            raise ValueError(str(e)) from None
        r, w, whence = (found[0], found[1], found[2] + "'s variables") if found else (0, 1, "the default")
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"rank {r} of world_size {w} (from {whence}): a rank is in 0..world_size-1")
    return r, w


def _whole(name: str, value, least: int, most: int = 2**64 - 1) -> int:
    """`value` as an int in `least..=most`; a bool, a fraction or a string is refused."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name}={value!r}: a whole number")
    value = int(value.__index__())
    if not least <= value <= most:
        raise ValueError(f"{name}={value}: a whole number from {least} to {most}")
    return value


def _mask_arg(mask) -> str:
    if mask is None or mask is False:
        return "off"
    if mask is True:
        return "bert"
    if isinstance(mask, str):
        if mask.lower() in ("bert", "roberta", "modernbert"):
            return mask.lower()
        raise ValueError(f"mask={mask!r}: a model family is bert, roberta or modernbert")
    if isinstance(mask, numbers.Real):
        rate = float(mask)
        if not 0.0 < rate < 1.0:
            raise ValueError(f"mask={mask!r}: a masking rate is a fraction in (0, 1)")
        return repr(rate)
    raise TypeError(f"mask={mask!r}: say True, False, a rate in (0, 1) or a model family")


class ShardDataset(_Base):
    """The rows of one split of a bertpipe shard folder, as `bertpipe train` draws them.

    Args:
        path: the shard folder (its `manifest.json`), or a bucket URL.
        split: the split to read.
        seed: the training seed: the order and the masks are those of `bertpipe train` with it.
        epoch: the epoch to start with (`set_epoch` changes it).
        rank, world_size: this process's share; default torch.distributed, else the
            RANK/WORLD_SIZE variables, else 0 of 1.
        shuffle: the trainer's shuffled order (else the split's stored order).
        mask: pretraining shards with dynamic masking: `True` (the pipeline's rate, else BERT's
            15%), a model family (`"roberta"`, `"modernbert"`: that family's rate), a rate, or
            `None`/`False` (rows unmasked, no `labels`). Shards the pipeline masked carry their
            masks as `labels` whatever this is.
        batch_size: the rows a rank trains per optimiser step — `bertpipe train`'s
            `per_device_train_batch_size × gradient_accumulation_steps` — which sets how a global
            batch is shared among ranks and how workers divide a rank's share (module doc).
        group_by_length: the trainer's default order: each window of 50 global batches sorted
            by length and cut into batches, the batches shuffled (less padding) — its full
            batches: the epoch's one short batch is left out, so a DataLoader's batches are the
            trainer's; False: the plain permutation, what the trainer draws with
            `group_by_length: false`.
        quiet: no progress while the row store is built (the first use of these shards: one
            pass over the split, which takes a while on a large corpus). By default it shows, on
            stderr: a bar on a terminal, `[row store] …` lines in a log.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike],
        split: str = "train",
        *,
        seed: int = 0,
        epoch: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: bool = True,
        mask: Union[None, bool, float, str] = None,
        batch_size: int = 1,
        group_by_length: bool = False,
        quiet: bool = False,
    ):
        self.path = os.fspath(path)
        self.split = split
        self.seed = _whole("seed", seed, 0)
        # The epoch lives in shared memory where torch is: persistent DataLoader workers keep
        # their copy of the dataset across epochs, and must see set_epoch.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_() if torch is not None else [0]
        self.epoch = _whole("epoch", epoch, 0)
        self.batch_size = _whole("batch_size", batch_size, 1, 2**40)
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.shuffle = bool(shuffle)
        self.group_by_length = bool(group_by_length)
        if self.group_by_length and not self.shuffle:
            raise ValueError("group_by_length groups the shuffled order (as the trainer does); it needs shuffle=True")
        self._mask = _mask_arg(mask)
        self._rows = _native.Rows(self.path, split, self.seed, self._mask, quiet)
        self._consumed = 0
        # Set (in shared memory) while DataLoader workers iterate copies of this dataset: the
        # progress is theirs then, and this process's `_consumed` says nothing.
        self._in_workers = torch.zeros((), dtype=torch.int64).share_memory_() if torch is not None else [0]
        # A loaded state not yet applied: (worker, num_workers, consumed, rotation), and the
        # epoch it is in.
        self._resume = None
        self._resume_epoch = None
        # With workers: the block the workers' round starts at (see __iter__).
        self._rotation = 0

    # DataLoader workers started by spawn or forkserver (Python 3.14's default) get a pickled
    # copy: the native reader is reopened there, its checksums already checked here.
    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_rows"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._rows = _native.Rows(self.path, self.split, self.seed, self._mask, True, False)

    @property
    def epoch(self) -> int:
        return int(self._epoch[()] if torch is not None else self._epoch[0])

    @epoch.setter
    def epoch(self, value: int) -> None:
        value = _whole("epoch", value, 0, 2**63 - 1)
        if torch is not None:
            self._epoch.fill_(value)
        else:
            self._epoch[0] = value

    # What the split holds.
    @property
    def task(self) -> str:
        """`classify` or `pretrain`."""
        return self._rows.task

    @property
    def label_names(self) -> List[str]:
        return list(self._rows.label_names)

    @property
    def pad_id(self) -> int:
        return self._rows.pad_id

    @property
    def mask_rate(self) -> Optional[float]:
        """The dynamic masking rate, else None."""
        return self._rows.mask_rate

    @property
    def rows_in_split(self) -> int:
        """Rows training draws from (classification: the labelled ones)."""
        return len(self._rows)

    def __len__(self) -> int:
        """This rank's rows per epoch (every rank has as many)."""
        n, w, b = len(self._rows), self.world_size, self.batch_size
        if self.group_by_length:
            return n // (b * w) * b
        return (n - n % w) // w

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` from its first row (its own order and masks) — unless a state
        loaded with `load_state_dict` is in that epoch: then the epoch goes on from it, so the
        usual loop (`load_state_dict` once, then `set_epoch(epoch)` at each epoch's start)
        resumes where it stopped. Another epoch drops the loaded state, with a warning."""
        epoch = _whole("epoch", epoch, 0, 2**63 - 1)
        if self._resume is not None and epoch == self._resume_epoch:
            self.epoch = epoch
            return
        if self._resume is not None:
            warnings.warn(
                f"set_epoch({epoch}) drops the state loaded for epoch {self._resume_epoch}: "
                "the epoch starts from its first row",
                stacklevel=2,
            )
        self.epoch = epoch
        self._consumed = 0
        self._resume = None
        self._resume_epoch = None
        self._rotation = 0

    # The share: this rank's blocks in order, as (length, read) with read(lo) the block's rows
    # from its row `lo` on. Global batch k holds positions k·G..k·G+s (G = batch_size ×
    # world_size; s = G but in the epoch's last batch); rank r's part of it is the trainer's,
    # `Share::part`: from ⌊r·s/world⌋, cut to ⌊s/world⌋ rows so every rank has as many. With
    # group_by_length the global batches are the trainer's length-grouped ones, read a window
    # (the trainer's 50 global batches sorted by length together) at a time, and only when one
    # of its blocks is wanted.
    def _blocks(self, epoch: int):
        n, w, b = len(self._rows), self.world_size, self.batch_size
        group = b * w
        if not self.group_by_length:
            for start in range(0, n, group):
                s = min(group, n - start)
                if s // w:
                    first = start + self.rank * s // w
                    yield s // w, (lambda lo, first=first, length=s // w: self._read(epoch, first, lo, length))
            return
        per = self._rows.group_batches
        for window in range(self._rows.windows(group)):
            cache = {}

            def parts(window=window, cache=cache):
                if "parts" not in cache:
                    cache["parts"] = self._rows.grouped(epoch, window, group, self.rank, w)
                return cache["parts"]

            if (window + 1) * per * group <= n:  # a whole window: every batch full
                for i in range(per):
                    yield b, (lambda lo, i=i, parts=parts: iter(parts()[i][lo:]))
            else:
                # The epoch's one short batch, which the shuffle put among the last window's,
                # is left out: a block shorter than batch_size there would shift the
                # DataLoader's batches off the trainer's (and off their lengths).
                for part in parts():
                    if len(part) == b:
                        yield b, (lambda lo, part=part: iter(part[lo:]))

    def _read(self, epoch: int, first: int, lo: int, length: int):
        for at in range(lo, length, _FETCH):
            yield from self._rows_at(epoch, first + at, min(_FETCH, length - at))

    def _rows_at(self, epoch: int, first: int, count: int) -> List[Dict[str, Any]]:
        if self.shuffle:
            rows = self._rows.order(epoch, first, first + count)
        else:
            rows = list(range(first, first + count))
        return self._rows.get(rows, epoch)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (None, 0)
        epoch = self.epoch
        skip_own, skip_share, rotation = 0, 0, 0
        if self._resume is not None:
            r_worker, r_workers, consumed, r_rotation = self._resume
            if r_worker is None:
                skip_share = consumed
                # A whole epoch consumed (its last step short) leaves nothing to hand out.
                if workers and consumed % self.batch_size and consumed < len(self):
                    raise ValueError(
                        f"consumed={consumed} is not a whole number of batches of {self.batch_size}: DataLoader "
                        "workers hand out whole batches, so they resume from steps × batch_size"
                    )
                # Workers take blocks in turn from the first block not wholly consumed, so the
                # DataLoader (which asks worker 0 first) goes on in the order one process would.
                rotation = consumed // self.batch_size
            elif (r_worker, r_workers) == (worker, workers):
                skip_own, rotation = consumed, r_rotation
            else:
                raise ValueError(
                    f"this state was saved by DataLoader worker {r_worker} of {r_workers}; it is loaded into "
                    + (f"worker {worker} of {workers}" if worker is not None else "a process without workers")
                    + ": resume with as many workers (StatefulDataLoader does), or save with state_dict(consumed=...)"
                )
            self._resume = None
            self._resume_epoch = None
        self._rotation = rotation
        if torch is not None:
            self._in_workers.fill_(int(worker is not None))
        else:
            self._in_workers[0] = int(worker is not None)
        # `_consumed` counts rows of this iterator's own sequence: the rank's share without
        # workers, this worker's blocks with them; rows skipped by a resume count as consumed.
        self._consumed = 0
        own_before = 0  # rows of this iterator's blocks before the current one
        share_at = 0  # index in the rank's share of the current block's first row
        for block, (length, read) in enumerate(self._blocks(epoch)):
            block_start = share_at
            share_at += length
            if workers and (block - rotation) % workers != worker:
                continue
            lo = min(length, max(skip_share - block_start, skip_own - own_before, 0))
            self._consumed = own_before + lo
            own_before += length
            if lo < length:
                for row in read(lo):
                    self._consumed += 1
                    yield row

    # Resume.
    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where the iteration stands. `consumed`: the rows of this rank the training loop has
        taken this epoch (steps × batch_size), when DataLoader workers iterate copies of the
        dataset and the plain DataLoader keeps no state."""
        info = _worker_info()
        in_workers = int(self._in_workers[()] if torch is not None else self._in_workers[0])
        if consumed is None and info is None and in_workers:
            raise ValueError(
                "DataLoader workers iterate copies of this dataset, so this process does not know how far "
                "they got: pass state_dict(consumed=steps * batch_size), or use torchdata's StatefulDataLoader"
            )
        state = {
            "format": _FORMAT,
            "path": self.path,
            "split": self.split,
            "rows_in_split": len(self._rows),
            "shards": self._rows.key,
            "seed": self.seed,
            "epoch": self.epoch,
            "shuffle": self.shuffle,
            "rank": self.rank,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "group_by_length": self.group_by_length,
            "worker": None,
            "num_workers": 0,
            "consumed": self._consumed,
            "rotation": self._rotation,
        }
        if consumed is not None:
            state["consumed"], state["rotation"] = self._checked_consumed(consumed), 0
        elif info is not None:
            state["worker"], state["num_workers"] = info.id, info.num_workers
        return state

    def _checked_consumed(self, consumed) -> int:
        """Rows of this rank consumed: up to whole steps of the epoch (the last step is short),
        counted as at most the rank's rows."""
        steps = -(-len(self) // self.batch_size)
        consumed = _whole("consumed", consumed, 0)
        if consumed > steps * self.batch_size:
            raise ValueError(
                f"consumed={consumed}: this rank has {len(self)} rows an epoch ({steps} steps of {self.batch_size})"
            )
        return min(consumed, len(self))

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from `state` (of `state_dict`) on the next pass: the next row is the one
        after the last consumed, in the state's epoch (a `set_epoch` of that epoch keeps it). The shards, split, seed, share and batch size must be those
        it was saved with."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError("not a ShardDataset state (no 'format': %r)" % (_FORMAT,))
        for key, ours in [
            ("shards", self._rows.key),
            ("rows_in_split", len(self._rows)),
            ("split", self.split),
            ("seed", self.seed),
            ("shuffle", self.shuffle),
            ("rank", self.rank),
            ("world_size", self.world_size),
            ("batch_size", self.batch_size),
            ("group_by_length", self.group_by_length),
        ]:
            if state.get(key) != ours:
                raise ValueError(
                    f"the state was saved with {key}={state.get(key)!r}, this dataset has {key}={ours!r}: "
                    "resuming would replay or skip rows"
                )
        self.epoch = state["epoch"]
        worker = state.get("worker")
        consumed = self._checked_consumed(state["consumed"]) if worker is None else _whole("consumed", state["consumed"], 0)
        self._consumed = consumed
        self._resume = (worker, int(state.get("num_workers") or 0), consumed, _whole("rotation", state.get("rotation") or 0, 0))
        self._resume_epoch = self.epoch

    @property
    def collate(self) -> "Collator":
        """A collate function for these rows: padded with the shards' pad id."""
        return Collator(pad_id=self.pad_id)


class Collator:
    """Makes a batch of ShardDataset rows.

    Padded (the default): `input_ids`, `attention_mask`, `token_type_ids` of shape
    `[rows, longest]`; `labels` `[rows]` (classification) or `[rows, longest]` with −100 at
    padding (MLM); `next_sentence_label` `[rows]`. `pad_to_multiple_of` rounds the length up.

    `flatten=True` (padding-free, as HF's `DataCollatorWithFlattening`): the rows as one
    stream `[1, tokens]` with `position_ids` restarting at `position_offset` in each row
    (RoBERTa counts from `pad_token_id + 1`), `cu_seq_lens_q`/`cu_seq_lens_k` (int32 row
    boundaries) and `max_length_q`/`max_length_k`, for varlen attention; MLM `labels` are
    flattened the same way, classification `labels` stay `[rows]`.

    Both keep `index` (each row's place in its split), `id` (classification) and packed rows'
    `doc_boundaries` (a list per row).
    """

    def __init__(self, pad_id: int = 0, *, flatten: bool = False, pad_to_multiple_of: Optional[int] = None,
                 position_offset: int = 0):
        self.pad_id = _whole("pad_id", pad_id, 0)
        self.flatten = bool(flatten)
        self.pad_to_multiple_of = None if pad_to_multiple_of is None else _whole("pad_to_multiple_of", pad_to_multiple_of, 1)
        self.position_offset = _whole("position_offset", position_offset, 0)
        if self.flatten and self.pad_to_multiple_of is not None:
            raise ValueError("pad_to_multiple_of pads rows; flatten=True has no padding to round")

    def __call__(self, rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        if torch is None:
            raise ImportError("Collator makes torch tensors: install torch")
        if not rows:
            raise ValueError("an empty batch")
        out: Dict[str, Any] = {}
        lengths = [len(r["input_ids"]) for r in rows]
        mlm = "labels" in rows[0] and isinstance(rows[0]["labels"], list)
        if self.flatten:
            out["input_ids"] = torch.tensor([[t for r in rows for t in r["input_ids"]]], dtype=torch.long)
            out["token_type_ids"] = torch.tensor([[t for r in rows for t in r["token_type_ids"]]], dtype=torch.long)
            out["position_ids"] = torch.tensor(
                [[self.position_offset + i for n in lengths for i in range(n)]], dtype=torch.long
            )
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + n)
            out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = torch.tensor(cu, dtype=torch.int32)
            out["max_length_q"] = out["max_length_k"] = max(lengths)
            if mlm:
                out["labels"] = torch.tensor([[t for r in rows for t in r["labels"]]], dtype=torch.long)
        else:
            longest = max(lengths)
            if self.pad_to_multiple_of:
                m = int(self.pad_to_multiple_of)
                longest = (longest + m - 1) // m * m
            pad = lambda xs, v: xs + [v] * (longest - len(xs))  # noqa: E731
            out["input_ids"] = torch.tensor([pad(list(r["input_ids"]), self.pad_id) for r in rows], dtype=torch.long)
            out["attention_mask"] = torch.tensor([pad([1] * n, 0) for n in lengths], dtype=torch.long)
            out["token_type_ids"] = torch.tensor([pad(list(r["token_type_ids"]), 0) for r in rows], dtype=torch.long)
            if mlm:
                out["labels"] = torch.tensor([pad(list(r["labels"]), -100) for r in rows], dtype=torch.long)
        if "labels" in rows[0] and not mlm:
            out["labels"] = torch.tensor([r["labels"] for r in rows], dtype=torch.long)
        if "next_sentence_label" in rows[0]:
            out["next_sentence_label"] = torch.tensor([r["next_sentence_label"] for r in rows], dtype=torch.long)
        out["index"] = torch.tensor([r["index"] for r in rows], dtype=torch.long)
        if any("doc_boundaries" in r for r in rows):
            out["doc_boundaries"] = [list(r.get("doc_boundaries", [])) for r in rows]
        if "id" in rows[0]:
            out["id"] = [r["id"] for r in rows]
        return out
