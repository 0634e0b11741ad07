"""The wheel's command, its notebook calls, to_hf_dataset, and a DDP run from ShardDataset."""

import os
import subprocess
import sys
import textwrap

import pytest

import bertpipe


def test_the_command_is_the_cargo_built_program(command, repo, tmp_path):
    out = subprocess.run([command, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("bertpipe ")
    ok = subprocess.run([command, "pipeline", "validate", "pipelines/imdb.yaml"], capture_output=True, text=True, cwd=repo)
    assert ok.returncode == 0 and ": ok (" in ok.stdout, ok.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: {type: jsonl, path: a.jsonl}\nsteps:\n  - type: tokenise\nsink: {type: parquet, path: o}\n")
    err = subprocess.run([command, "pipeline", "validate", str(bad)], capture_output=True, text=True)
    assert err.returncode == 78, err.stderr
    assert "bad.yaml:4" in err.stderr and "tokenize" in err.stderr
    usage = subprocess.run([command, "no-such-verb"], capture_output=True, text=True)
    assert usage.returncode == 2
    # As the binary: a closed pipe ends it quietly, Ctrl-C at once with 130.
    piped = subprocess.run(f"{command} stats {repo}/data/aclImdb-sample --json --quiet | head -c 1",
                           shell=True, capture_output=True, text=True)
    assert "Traceback" not in piped.stderr and "panicked" not in piped.stderr, piped.stderr


def test_ctrl_c_stops_the_command_at_once(command, repo, tmp_path):
    import signal
    import time

    # The corpus is a FIFO this test holds open: the run waits for more text until Ctrl-C.
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    pipeline = tmp_path / "fifo.yaml"
    pipeline.write_text(textwrap.dedent(f"""
        name: fifo
        source: {{type: jsonl, path: {fifo}}}
        steps:
          - type: tokenize
            vocab: {repo}/data/vocab/bert-base-uncased.txt
          - type: classify_sequences
            max_len: 64
        sink: {{type: parquet, path: {tmp_path / 'o'}}}
    """))
    proc = subprocess.Popen(
        [command, "pipeline", "run", str(pipeline)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    with open(fifo, "w") as writer:
        for i in range(100):
            writer.write('{"id": "%d", "text": "a film worth seeing", "label": %d}\n' % (i, i % 2))
        writer.flush()
        time.sleep(2)  # the command starts (Python, then the library) and reads what is there
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - start
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert took < 2.0, took
    assert not (tmp_path / "o/manifest.json").exists(), "stopped before the end"


def test_pipeline_run_returns_the_manifest(repo, tmp_path):
    summary = bertpipe.pipeline_run(repo / "pipelines/imdb.yaml", [f"sink.path={tmp_path / 'o'}"])
    m = summary["manifest"]
    assert summary["out"] == str(tmp_path / "o")
    assert set(m["splits"]) == {"train", "test"}
    assert all(s["docs_in"] == s["docs_out"] + sum(s["rejected"].values()) for s in m["splits"].values())
    assert (tmp_path / "o/manifest.json").exists()


def test_a_bad_pipeline_is_one_located_error(repo, tmp_path):
    with pytest.raises(bertpipe.BertpipeError) as e:
        bertpipe.pipeline_run(repo / "pipelines/imdb.yaml", ["steps[0].typo=1", f"sink.path={tmp_path}/o"])
    assert "typo" in str(e.value) and "--set" in str(e.value)


def test_pipeline_run_refuses_to_run_as_ranks(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    with pytest.raises(bertpipe.BertpipeError, match="rank 1 of 2 \\(mpirun\\).*does not run under a launcher"):
        bertpipe.pipeline_run(repo / "pipelines/imdb.yaml", [f"sink.path={tmp_path / 'o'}"])
    assert not (tmp_path / "o").exists()


def test_stats_is_the_reports_dict(imdb):
    report = bertpipe.stats(imdb, by="label")
    as_json = subprocess.run(["bertpipe", "stats", str(imdb), "--by", "label", "--json", "--quiet"],
                             capture_output=True, text=True, check=True).stdout
    import json

    assert report == json.loads(as_json)
    with pytest.raises(bertpipe.BertpipeError, match="not a grouping"):
        bertpipe.stats(imdb, by="colour")


def test_to_hf_dataset_equals_the_shards(imdb):
    import datasets
    import pyarrow.parquet as pq

    ds = bertpipe.to_hf_dataset(imdb, "train")
    table = pq.read_table(sorted(imdb.glob("train/*.parquet")))
    assert ds.num_rows == table.num_rows
    assert ds.features["label"] == datasets.ClassLabel(names=["neg", "pos"])
    assert ds["id"] == table.column("id").to_pylist()
    assert ds["input_ids"] == table.column("input_ids").to_pylist()
    assert ds["label"] == table.column("label").to_pylist()


def test_an_empty_split_is_said(repo, tmp_path):
    out = tmp_path / "empty"
    bertpipe.pipeline_run(repo / "pipelines/imdb.yaml", [f"sink.path={out}", "steps[4].min_words=100000"])
    with pytest.raises(bertpipe.BertpipeError, match="split `train`.*no shards"):
        bertpipe.to_hf_dataset(out, "train")


def test_without_torch_the_dataset_is_a_plain_iterable(imdb):
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # import torch fails, as where it is not installed
        import bertpipe
        ds = bertpipe.ShardDataset({str(imdb)!r}, "train", seed=42)
        rows = list(ds)
        assert len(rows) == len(ds) > 0 and type(ds).__mro__[1] is object
        print(len(rows))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


DDP = """
import os, sys, torch, torch.distributed as dist
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForSequenceClassification
import bertpipe

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
ds = bertpipe.ShardDataset(sys.argv[1], "train", seed=42, batch_size=4)  # rank and world from torch.distributed
assert (ds.rank, ds.world_size) == (rank, world)
cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, num_labels=len(ds.label_names))
model = torch.nn.parallel.DistributedDataParallel(BertForSequenceClassification(cfg))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
seen = []
loader = iter(DataLoader(ds, batch_size=4, num_workers=2, collate_fn=ds.collate))
for step, batch in enumerate(loader):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"], labels=batch["labels"])
    out.loss.backward()
    opt.step(); opt.zero_grad()
    seen += batch["index"].tolist()
    if step == 4:
        break
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
sums = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
dist.all_gather(sums, torch.tensor([flat.double().sum().item(), flat.double().abs().sum().item()], dtype=torch.float64))
rows = [None] * world
dist.all_gather_object(rows, seen)
if rank == 0:
    assert all(torch.equal(s, sums[0]) for s in sums), sums
    assert not set(rows[0]) & set(rows[1]) and len(rows[0]) == len(rows[1]) == 20
    print("ranks agree:", sums[0].tolist(), flush=True)
# Shut down in order: the loader's workers first, then no rank leaves while the other is
# still inside a collective (a rank that tore gloo down early was seen to abort at exit).
del loader
dist.barrier()
dist.destroy_process_group()
"""


def test_a_torchrun_ddp_run_trains_from_sharddataset(imdb, tmp_path):
    pytest.importorskip("transformers")
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(script), str(imdb)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ranks agree:" in out.stdout


def test_the_documented_example_runs_as_written(repo, tmp_path):
    """The README's PyTorch example ("From Python"), run as written in a folder with the
    repository's pipelines and sample."""
    text = (repo / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert 12 <= len(code.strip().splitlines()) <= 16, "the example is about 15 lines"
    (tmp_path / "pipelines").symlink_to(repo / "pipelines")
    (tmp_path / "data").symlink_to(repo / "data")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr
    losses = [float(l.split()[1]) for l in out.stdout.splitlines()]
    assert len(losses) == 2 and all(l == l for l in losses)
