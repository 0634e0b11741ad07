"""ShardDataset against the trainer: order, shares among ranks and workers, resume, masks."""

import collections
import subprocess

import pytest
import torch
from torch.utils.data import DataLoader

import bertpipe
from bertpipe import ShardDataset


def indices(rows):
    return [int(r["index"]) for r in rows]


def loader_indices(ds, workers, batch_size=4):
    dl = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=ds.collate)
    return [int(i) for batch in dl for i in batch["index"]]


def test_two_ranks_two_workers_cover_the_split_once_with_equal_shares(imdb):
    n = ShardDataset(imdb, "train", seed=7).rows_in_split
    shares = []
    for rank in range(2):
        ds = ShardDataset(imdb, "train", seed=7, rank=rank, world_size=2, batch_size=4)
        got = loader_indices(ds, workers=2)
        assert len(got) == len(ds) == n // 2
        # Two workers yield the rank's share in the order one process does.
        assert got == indices(ds)
        shares.append(got)
    assert len(shares[0]) == len(shares[1])
    assert not set(shares[0]) & set(shares[1])
    everything = set(shares[0]) | set(shares[1])
    assert len(everything) == n - n % 2
    assert everything <= set(indices(ShardDataset(imdb, "train", seed=7)))


def test_an_odd_world_leaves_out_the_tail_of_each_epoch_not_the_same_rows(imdb):
    n = ShardDataset(imdb, "train", seed=3).rows_in_split
    left_out = []
    for epoch in range(3):
        seen = set()
        for rank in range(3):
            ds = ShardDataset(imdb, "train", seed=3, epoch=epoch, rank=rank, world_size=3, batch_size=5)
            rows = indices(ds)
            assert len(rows) == n // 3
            seen |= set(rows)
        assert len(seen) == n - n % 3
        left_out.append(set(range(n)) - seen)
    if n % 3:
        assert left_out[0] != left_out[1] or left_out[1] != left_out[2]


def show_batches(command, repo, recipe, shards, epoch, batches, extra=()):
    """The rows of `bertpipe train RECIPE --dry-run --show-batches`, as dicts by column."""
    out = subprocess.run(
        [command, "train", str(repo / recipe), "--set", f"data={shards}",
         "--set", "group_by_length=false", "--set", "output_dir=/nonexistent/never-written",
         *extra, "--dry-run", "--show-batches", f"{epoch}:0..{batches}"],
        capture_output=True, text=True, cwd=repo,
    )
    assert out.returncode == 0, out.stderr
    lines = [l.split("\t") for l in out.stdout.splitlines()]
    head = next(i for i, l in enumerate(lines) if l[:4] == ["epoch", "batch", "step", "row"])
    return [dict(zip(lines[head], l)) for l in lines[head + 1:] if len(l) == len(lines[head])]


def train_rows(command, repo, shards, epoch, batches):
    """The `row` column of `--show-batches` for the fine-tune recipe."""
    rows = show_batches(command, repo, "pipelines/imdb-finetune.yaml", shards, epoch, batches)
    return [int(r["row"]) for r in rows]


@pytest.mark.parametrize("epoch", [0, 1])
def test_the_order_is_the_trainers(imdb, repo, command, epoch):
    trainer = train_rows(command, repo, imdb, epoch, batches=6)
    assert len(trainer) == 6 * 16
    ds = ShardDataset(imdb, "train", seed=42, epoch=epoch)
    assert indices(ds)[: len(trainer)] == trainer
    # Another seed is another order.
    assert indices(ShardDataset(imdb, "train", seed=43, epoch=epoch))[: len(trainer)] != trainer


def test_two_ranks_take_the_trainers_parts_of_each_global_batch(imdb, repo, command):
    # Global batch 16 = 8 per rank × 2: rank r takes rows 8r..8r+8 of each trainer batch, and
    # of the epoch's last, short batch of s rows ⌊s/2⌋ from ⌊r·s/2⌋ (the trainer's part, cut so
    # both ranks have as many).
    n = ShardDataset(imdb, "train").rows_in_split
    batches = -(-n // 16)
    trainer = train_rows(command, repo, imdb, 0, batches=batches)
    assert len(trainer) == n
    for rank in range(2):
        ds = ShardDataset(imdb, "train", seed=42, rank=rank, world_size=2, batch_size=8)
        want = []
        for b in range(batches):
            batch = trainer[16 * b: 16 * b + 16]
            s = len(batch)
            want += batch[rank * s // 2: rank * s // 2 + s // 2]
        assert indices(ds) == want


@pytest.mark.parametrize("epoch,ranks,per_rank", [(0, 2, 8), (1, 2, 8), (0, 2, 1), (1, 3, 2)])
def test_length_grouped_batches_are_the_trainers_default(imdb, repo, command, epoch, ranks, per_rank):
    # The trainer's global batch on one process, shown batch by batch; 290 rows make one
    # window at 16 rows a batch, and three (two whole) at 2.
    g = ranks * per_rank
    n = ShardDataset(imdb, "train").rows_in_split
    batches = -(-n // g)
    rows = show_batches(command, repo, "pipelines/imdb-finetune.yaml", imdb, epoch, batches,
                        extra=["--set", "group_by_length=true", "--set", f"per_device_train_batch_size={g}"])
    by_batch = [[int(r["row"]) for r in rows if int(r["batch"]) == b] for b in range(batches)]
    assert sum(map(len, by_batch)) == n
    # Its full batches: the epoch's short one (somewhere in the last window) is left out.
    by_batch = [batch for batch in by_batch if len(batch) == g]
    whole = ShardDataset(imdb, "train", seed=42, epoch=epoch, batch_size=g, group_by_length=True)
    assert indices(whole) == [row for batch in by_batch for row in batch]
    assert len(whole) == n // g * g
    for rank in range(ranks):
        def ds():
            return ShardDataset(imdb, "train", seed=42, epoch=epoch, rank=rank, world_size=ranks,
                                batch_size=per_rank, group_by_length=True)

        want = [row for batch in by_batch for row in batch[rank * per_rank: (rank + 1) * per_rank]]
        assert indices(ds()) == want
        assert loader_indices(ds(), workers=2, batch_size=per_rank) == want
        # Resumed from the rows a loop consumed, with workers.
        half = len(want) // per_rank // 2 * per_rank  # half the epoch's steps
        again = ds()
        again.load_state_dict(ds().state_dict(consumed=half))
        assert loader_indices(again, workers=2, batch_size=per_rank) == want[half:]


def test_three_ranks_take_subsets_of_the_trainers_parts_in_a_short_last_batch(imdb):
    # 290 rows, global batch 3 × 5 = 15: the last batch has 5 rows, parts of 1, 2, 2 rows in
    # the trainer; each rank takes one, from its own part.
    full = indices(ShardDataset(imdb, "train", seed=7, epoch=1))
    n = len(full)
    s = n % 15 or 15
    last = full[n - s:]
    for rank in range(3):
        ds = ShardDataset(imdb, "train", seed=7, epoch=1, rank=rank, world_size=3, batch_size=5)
        rows = indices(ds)
        assert len(rows) == len(ds) == n // 3
        tail = rows[(n - s) // 3:]
        assert tail == last[rank * s // 3: rank * s // 3 + s // 3]


def test_resume_at_row_37_continues_the_same_sequence(imdb):
    full = indices(ShardDataset(imdb, "train", seed=5, epoch=2))
    ds = ShardDataset(imdb, "train", seed=5, epoch=2)
    it = iter(ds)
    first = [int(next(it)["index"]) for _ in range(37)]
    state = ds.state_dict()
    assert state["consumed"] == 37
    again = ShardDataset(imdb, "train", seed=5)
    again.load_state_dict(state)
    assert first + indices(again) == full
    # The next epoch starts from its first row.
    again.set_epoch(3)
    assert indices(again) == indices(ShardDataset(imdb, "train", seed=5, epoch=3))


@pytest.mark.parametrize("workers,steps", [(2, 10), (2, 7), (3, 7), (3, 0)])
def test_resume_across_workers_from_the_rows_the_loop_consumed(imdb, workers, steps):
    ds = ShardDataset(imdb, "train", seed=5, rank=1, world_size=2, batch_size=4)
    full = loader_indices(ds, workers=workers)
    state = ds.state_dict(consumed=steps * 4)
    again = ShardDataset(imdb, "train", seed=5, rank=1, world_size=2, batch_size=4)
    again.load_state_dict(state)
    assert loader_indices(again, workers=workers) == full[steps * 4:]


def test_a_checkpoint_after_the_last_short_step_and_part_batches(imdb):
    ds = ShardDataset(imdb, "train", seed=5, epoch=2, batch_size=8)
    steps = len(DataLoader(ds, batch_size=8))
    assert steps * 8 > len(ds)
    state = ds.state_dict(consumed=steps * 8)  # the end of the epoch
    assert state["consumed"] == len(ds)
    again = ShardDataset(imdb, "train", seed=5, batch_size=8)
    again.load_state_dict(state)
    assert indices(again) == []
    with pytest.raises(ValueError, match="steps of 8"):
        ds.state_dict(consumed=steps * 8 + 1)
    # Part of a batch: fine without workers, refused with them (they hand out whole batches).
    again.load_state_dict(ds.state_dict(consumed=13))
    assert indices(again) == indices(ShardDataset(imdb, "train", seed=5, epoch=2))[13:]
    again.load_state_dict(ds.state_dict(consumed=13))
    with pytest.raises(ValueError, match="whole number of batches"):
        loader_indices(again, workers=2, batch_size=8)


def test_set_epoch_reaches_persistent_workers(imdb):
    ds = ShardDataset(imdb, "train", seed=5, batch_size=8)
    dl = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True, collate_fn=ds.collate)
    for epoch in range(3):
        ds.set_epoch(epoch)
        got = [int(i) for batch in dl for i in batch["index"]]
        assert got == indices(ShardDataset(imdb, "train", seed=5, epoch=epoch)), epoch


def test_spawned_workers_read_the_same_rows(imdb):
    ds = ShardDataset(imdb, "train", seed=5, batch_size=4)
    dl = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=ds.collate, multiprocessing_context="spawn")
    assert [int(i) for batch in dl for i in batch["index"]] == indices(ds)


def test_resume_with_statefuldataloader_and_workers(imdb):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = ShardDataset(imdb, "train", seed=9, batch_size=4)
    full = loader_indices(ds, workers=0)
    dl = stateful.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=ds.collate)
    it = iter(dl)
    first = [int(i) for _ in range(5) for i in next(it)["index"]]
    state = dl.state_dict()
    del it
    ds2 = ShardDataset(imdb, "train", seed=9, batch_size=4)
    dl2 = stateful.StatefulDataLoader(ds2, batch_size=4, num_workers=2, collate_fn=ds2.collate)
    dl2.load_state_dict(state)
    rest = [int(i) for batch in dl2 for i in batch["index"]]
    assert first + rest == full


def test_a_state_of_other_shards_or_shares_is_refused(imdb):
    ds = ShardDataset(imdb, "train", seed=5, rank=0, world_size=2)
    state = ds.state_dict()
    with pytest.raises(ValueError, match="world_size"):
        ShardDataset(imdb, "train", seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        ShardDataset(imdb, "train", seed=6, rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="not a ShardDataset state"):
        ds.load_state_dict({"consumed": 3})


def test_a_state_over_other_shards_of_as_many_rows_is_refused(imdb, repo, tmp_path):
    # The same reviews cut at 256 tokens: as many rows, other ids.
    other = tmp_path / "imdb256"
    bertpipe.pipeline_run(repo / "pipelines/imdb.yaml", [f"sink.path={other}", "steps[7].max_len=256"])
    a = ShardDataset(imdb, "train", seed=42)
    b = ShardDataset(other, "train", seed=42)
    assert a.rows_in_split == b.rows_in_split
    it = iter(a)
    for _ in range(10):
        next(it)
    with pytest.raises(ValueError, match="shards"):
        b.load_state_dict(a.state_dict())
    # The same shards in another folder are the same rows.
    import shutil

    shutil.copytree(imdb, tmp_path / "copy")
    c = ShardDataset(tmp_path / "copy", "train", seed=42)
    c.load_state_dict(a.state_dict())
    assert indices(c) == indices(ShardDataset(imdb, "train", seed=42))[10:]


def test_rows_are_what_the_shards_hold(imdb):
    import pyarrow.parquet as pq

    ds = ShardDataset(imdb, "test", shuffle=False)
    table = pq.read_table(sorted(imdb.glob("test/*.parquet"))).to_pylist()
    rows = list(ds)
    assert len(rows) == len(table)
    for row, ref in zip(rows, table):
        assert row["id"] == ref["id"]
        assert row["input_ids"] == list(ref["input_ids"])
        assert row["labels"] == ref["label"]
        assert row["attention_mask"] == [1] * len(ref["input_ids"])
    assert ds.label_names == ["neg", "pos"]


def test_dynamic_masks_are_the_rate_and_80_10_10(pretrain):
    ds = ShardDataset(pretrain, "train", seed=1, mask=True)
    assert ds.task == "pretrain" and ds.mask_rate == pytest.approx(0.15)
    plain = {r["index"]: r["input_ids"] for r in ShardDataset(pretrain, "train", seed=1, mask=False)}
    counts = collections.Counter()
    for r in ds:
        original = plain[r["index"]]
        for i, (tok, lab) in enumerate(zip(r["input_ids"], r["labels"])):
            if original[i] in (101, 102, 0):  # [CLS] [SEP] [PAD]: never masked
                assert lab == -100
                continue
            counts["candidates"] += 1
            if lab == -100:
                assert tok == original[i]
                continue
            assert lab == original[i]
            counts["masked"] += 1
            counts["mask" if tok == 103 else "same" if tok == original[i] else "random"] += 1
    rate = counts["masked"] / counts["candidates"]
    assert 0.13 < rate < 0.16, counts
    m = counts["masked"]
    assert abs(counts["mask"] / m - 0.8) < 0.03, counts
    assert abs(counts["same"] / m - 0.1) < 0.03, counts
    assert abs(counts["random"] / m - 0.1) < 0.03, counts


@pytest.mark.parametrize("epoch", [0, 1])
def test_the_masks_are_the_trainers(pretrain, repo, command, epoch):
    trainer = show_batches(command, repo, "pipelines/imdb-mlm.yaml", pretrain, epoch, batches=3)
    assert len(trainer) == 3 * 32
    rows = list(ShardDataset(pretrain, "train", seed=42, epoch=epoch, mask=True))[: len(trainer)]
    assert [r["index"] for r in rows] == [int(t["row"]) for t in trainer]
    for r, t in zip(rows, trainer):
        masked = [i for i, l in enumerate(r["labels"]) if l != -100]
        assert masked == sorted(int(p) for p in t["masked"].split(",")), (r["index"], masked, t["masked"])


def test_masks_are_keyed_by_seed_epoch_and_row_not_by_share(pretrain):
    def masks(**kw):
        return {r["index"]: r["labels"] for r in ShardDataset(pretrain, "train", mask=True, **kw)}

    once = masks(seed=1)
    assert masks(seed=1) == once
    shared = {}
    for rank in range(2):
        shared.update(masks(seed=1, rank=rank, world_size=2, batch_size=3))
    assert all(once[i] == labels for i, labels in shared.items())
    assert masks(seed=1, epoch=1) != once
    assert masks(seed=2) != once


def test_a_family_rate_applies_when_the_pipeline_gives_none(pretrain):
    ds = ShardDataset(pretrain, "train", mask="modernbert")
    assert ds.mask_rate == pytest.approx(0.3)
    labels = [l for r in ds for l in r["labels"]]
    masked = sum(l != -100 for l in labels)
    tokens = sum(1 for r in ds for t in r["input_ids"] if t not in (101, 102, 0))
    assert 0.27 < masked / tokens < 0.31


def test_a_rate_other_than_the_pipelines_is_refused(repo, tmp_path):
    shards = tmp_path / "rated"
    bertpipe.pipeline_run(repo / "pipelines/imdb-pretrain.yaml", [f"sink.path={shards}", "steps[7].masking=dynamic"])
    assert ShardDataset(shards, "train", mask=True).mask_rate == pytest.approx(0.15)
    with pytest.raises(bertpipe.BertpipeError, match="masked_lm_prob 0.15"):
        ShardDataset(shards, "train", mask=0.5)


def test_nsp_labels_come_with_pretraining_rows(pretrain):
    rows = list(ShardDataset(pretrain, "train", mask=True))
    assert {r["next_sentence_label"] for r in rows} == {0, 1}
    batch = ShardDataset(pretrain, "train", mask=True).collate(rows[:4])
    assert batch["next_sentence_label"].shape == (4,)
    assert batch["labels"].shape == batch["input_ids"].shape


def test_padded_and_flattened_batches_hold_the_same_tokens(imdb):
    ds = ShardDataset(imdb, "train", seed=2)
    rows = list(ds)[:6]
    padded = ds.collate(rows)
    flat = bertpipe.Collator(pad_id=ds.pad_id, flatten=True)(rows)
    lengths = [len(r["input_ids"]) for r in rows]
    assert padded["input_ids"].shape == (6, max(lengths))
    assert flat["input_ids"].shape == (1, sum(lengths))
    assert flat["input_ids"][0].tolist() == padded["input_ids"][padded["attention_mask"].bool()].tolist()
    assert flat["cu_seq_lens_q"].tolist() == [sum(lengths[:i]) for i in range(7)]
    assert flat["cu_seq_lens_q"].dtype == torch.int32 and flat["max_length_q"] == max(lengths)
    assert flat["position_ids"][0, : lengths[0]].tolist() == list(range(lengths[0]))
    assert flat["position_ids"][0, lengths[0]] == 0
    assert flat["labels"].tolist() == padded["labels"].tolist() == [r["labels"] for r in rows]


def test_mistakes_are_said(imdb, tmp_path):
    with pytest.raises(bertpipe.BertpipeError, match="no split `validation`.*train"):
        ShardDataset(imdb, "validation")
    with pytest.raises(bertpipe.BertpipeError, match="manifest"):
        ShardDataset(tmp_path, "train")
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        ShardDataset(imdb, rank=2, world_size=2)
    with pytest.raises(ValueError, match="both rank and world_size"):
        ShardDataset(imdb, rank=1)
    with pytest.raises(ValueError, match="masking rate"):
        ShardDataset(imdb, mask=1.5)
    with pytest.raises(ValueError, match="seed=-1"):
        ShardDataset(imdb, seed=-1)
    with pytest.raises(TypeError, match="batch_size=2.7"):
        ShardDataset(imdb, batch_size=2.7)
    with pytest.raises(ValueError, match="pad_to_multiple_of=-8"):
        bertpipe.Collator(pad_to_multiple_of=-8)
    with pytest.raises(ValueError, match="flatten"):
        bertpipe.Collator(pad_to_multiple_of=8, flatten=True)
    with pytest.raises(ValueError, match="seed=18446744073709551616"):
        ShardDataset(imdb, seed=2**64)


def test_rank_and_world_come_from_the_environment(imdb, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = ShardDataset(imdb, "train")
    assert (ds.rank, ds.world_size) == (1, 3)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match="rank 3 of 3"):
        ShardDataset(imdb, "train")
    # mpirun's variables, as bertpipe train reads them, win over torchrun's.
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    ds = ShardDataset(imdb, "train")
    assert (ds.rank, ds.world_size) == (1, 2)


def test_a_damaged_shard_is_refused(imdb, tmp_path):
    import shutil

    copy = tmp_path / "imdb"
    shutil.copytree(imdb, copy)
    shard = sorted(copy.glob("train/*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(bertpipe.BertpipeError, match="checksum"):
        ShardDataset(copy, "train")


def test_the_readme_loop_with_resume_goes_on_from_the_state(imdb):
    # load_state_dict once, then set_epoch(epoch) at each epoch's start, as README's loop
    # does: set_epoch of the state's own epoch keeps the resume (it replayed the epoch).
    ds = ShardDataset(imdb, "train", seed=5, batch_size=4)
    ds.set_epoch(1)
    full = loader_indices(ds, workers=0)
    state = ds.state_dict(consumed=5 * 4)
    again = ShardDataset(imdb, "train", seed=5, batch_size=4)
    again.load_state_dict(state)
    for epoch in range(state["epoch"], 3):
        again.set_epoch(epoch)
        got = loader_indices(again, workers=2)
        if epoch == 1:
            assert got == full[20:]
        else:
            assert got == indices(ShardDataset(imdb, "train", seed=5, epoch=epoch))
    # set_epoch of another epoch drops the state, and says so.
    again.load_state_dict(state)
    with pytest.warns(UserWarning, match="drops the state loaded for epoch 1"):
        again.set_epoch(2)
    assert indices(again) == indices(ShardDataset(imdb, "train", seed=5, epoch=2))


def test_state_dict_in_the_main_process_while_workers_iterate_is_refused(imdb):
    # The workers' progress is not in the main process: consumed=0 there would replay the
    # epoch on resume.
    ds = ShardDataset(imdb, "train", seed=5, batch_size=4)
    dl = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=ds.collate)
    it = iter(dl)
    next(it)
    next(it)
    with pytest.raises(ValueError, match="consumed=steps"):
        ds.state_dict()
    assert ds.state_dict(consumed=8)["consumed"] == 8
    del it
    # Iterated in this process again: its own count is the progress.
    rows = iter(ds)
    next(rows)
    assert ds.state_dict()["consumed"] == 1


def test_a_state_after_the_epochs_short_last_step_resumes_with_workers(imdb):
    ds = ShardDataset(imdb, "train", seed=5, epoch=2, batch_size=8)
    assert len(ds) % 8, "the epoch's last step is short"
    steps = len(DataLoader(ds, batch_size=8))
    state = ds.state_dict(consumed=steps * 8)
    again = ShardDataset(imdb, "train", seed=5, batch_size=8)
    again.load_state_dict(state)
    assert loader_indices(again, workers=2, batch_size=8) == []
