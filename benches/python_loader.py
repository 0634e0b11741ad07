"""One epoch of MLM batches from pretraining shards, through bertpipe.ShardDataset (the
trainer's order and dynamic masks, its Collator) or through `datasets.load_dataset("parquet")`
+ DataCollatorForLanguageModeling (HF's masking, shuffled by the DataLoader). Prints
`rows seconds main_rss_kib worker_rss_kib`. Used by benches/python_loader.sh."""

import resource
import sys
import time

from torch.utils.data import DataLoader

mode, shards, workers, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
BATCH = 32

if mode == "bertpipe":
    import bertpipe

    ds = bertpipe.ShardDataset(shards, "train", seed=0, mask=True, batch_size=BATCH)
    dl = DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=ds.collate)
else:
    import glob

    from datasets import load_dataset
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    files = sorted(glob.glob(f"{shards}/train/*.parquet"))
    ds = load_dataset("parquet", data_files={"train": files}, split="train")
    ds = ds.select_columns(["input_ids", "token_type_ids", "next_sentence_label"])
    tok = BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    collate = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    dl = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, collate_fn=collate)

start = time.perf_counter()
rows = 0
for batch in dl:
    rows += batch["input_ids"].shape[0]
    assert (batch["labels"] != -100).any()
seconds = time.perf_counter() - start
print(rows, f"{seconds:.3f}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
