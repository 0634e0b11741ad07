//! The ordered parallel stream: one reader thread, `threads` workers, and the caller's thread
//! consuming results strictly in input order. Channels are bounded and a fixed number of
//! batches may be in flight, so memory does not grow with the corpus.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use crossbeam_channel::{bounded, Receiver, Sender};

use crate::config::PipelineStep;
use crate::contract::document::{Document, OrderKey, Rejected};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;
use crate::contract::Verdict;
use crate::pipeline::seen::Seen;
use crate::source::{Emit, Source, SourceItem};

/// A batch closes at this many documents or this many bytes of text, whichever comes first.
const BATCH_DOCS: usize = 256;
const BATCH_BYTES: usize = 512 * 1024;

/// What happened to one document, in input order.
pub enum Outcome {
    Kept(Document),
    Rejected(Rejected),
}

impl Outcome {
    pub fn input_bytes(&self) -> u64 {
        match self {
            Outcome::Kept(d) => d.input_bytes,
            Outcome::Rejected(r) => r.input_bytes,
        }
    }
}

/// A worker's result for one document, before the ordered stage applies `dedup` and
/// `near_dedup`.
struct Processed<M> {
    outcome: Outcome,
    order_keys: Vec<OrderKey>,
    /// The text as read, kept only while an ordered decision may still turn the document into a reject.
    original: Option<String>,
    /// What the caller's `measure` made of a kept document, on the worker.
    measured: Option<M>,
    /// Bytes of a file the worker read (the reader handed it over unread).
    read_bytes: u64,
}

fn run_steps<M>(
    steps: &[PipelineStep],
    item: SourceItem,
    measure: &(dyn Fn(&Document) -> M + Sync),
) -> Result<Processed<M>> {
    let (item, read_bytes) = match item {
        SourceItem::File(f) => {
            let item = f.load()?;
            let read = match &item {
                SourceItem::Doc(d) => d.input_bytes,
                SourceItem::Reject(r) => r.input_bytes,
                SourceItem::File(_) => unreachable!("a loaded file is a document or a reject"),
            };
            (item, read)
        }
        item => (item, 0),
    };
    let mut doc = match item {
        SourceItem::Doc(d) => d,
        SourceItem::Reject(r) => {
            return Ok(Processed {
                outcome: Outcome::Rejected(r),
                order_keys: Vec::new(),
                original: None,
                measured: None,
                read_bytes,
            })
        }
        SourceItem::File(_) => unreachable!("loaded above"),
    };
    let original = doc.text.clone();
    for step in steps {
        if let Verdict::Reject(reason) = step.as_step().apply(&mut doc) {
            let rejected = Rejected {
                id: doc.id,
                split: doc.split,
                step: step.type_name().to_string(),
                reason,
                origin: doc.origin,
                text: original,
                input_bytes: doc.input_bytes,
            };
            return Ok(Processed {
                outcome: Outcome::Rejected(rejected),
                order_keys: doc.order_keys,
                original: None,
                measured: None,
                read_bytes,
            });
        }
    }
    let keep_original = !doc.order_keys.is_empty();
    let measured = Some(measure(&doc));
    Ok(Processed {
        order_keys: std::mem::take(&mut doc.order_keys),
        outcome: Outcome::Kept(doc),
        original: keep_original.then_some(original),
        measured,
        read_bytes,
    })
}

/// Collects source items into batches and hands them to the workers, waiting for a free slot
/// so that at most `slots` batches exist at once.
struct Batcher<'a> {
    batch: Vec<SourceItem>,
    bytes: usize,
    seq: u64,
    work: &'a Sender<(u64, Vec<SourceItem>)>,
    slots: &'a Receiver<()>,
    on_total: &'a (dyn Fn(Total) + Sync),
    /// Bytes of document text read so far (files handed over unread are counted as the
    /// workers read them), for throughput that does not depend on compression.
    text_bytes: u64,
    workers: usize,
}

impl Batcher<'_> {
    fn send(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.slots.recv().map_err(|_| anyhow!("pipeline stopped"))?;
        let batch = std::mem::take(&mut self.batch);
        self.work.send((self.seq, batch)).map_err(|_| anyhow!("pipeline stopped"))?;
        self.seq += 1;
        self.bytes = 0;
        Ok(())
    }
}

impl Emit for Batcher<'_> {
    fn total(&mut self, total: Total) {
        (self.on_total)(total);
    }

    fn reads_files(&self) -> bool {
        self.workers > 1
    }

    fn emit(&mut self, item: SourceItem) -> Result<()> {
        let len = match &item {
            SourceItem::Doc(d) => d.text.len(),
            SourceItem::Reject(r) => r.text.len(),
            // Not read yet (batches of files close at BATCH_DOCS).
            SourceItem::File(_) => 0,
        };
        self.bytes += len;
        self.text_bytes += len as u64;
        self.batch.push(item);
        if self.batch.len() >= BATCH_DOCS || self.bytes >= BATCH_BYTES {
            self.send()?;
        }
        Ok(())
    }
}

/// What a run reads: the source, the pipeline's seed (it keys split fractions), the part of
/// the input this process takes, and the documents `dedup` / `near_dedup` already kept before
/// that part (by earlier tasks of an array; nothing for a single run).
pub struct CorpusPart<'a> {
    pub source: &'a Source,
    pub seed: u64,
    pub part: Partition,
    pub seen: Seen,
}

impl<'a> CorpusPart<'a> {
    /// All of `source`, as one process reads it, through `steps`.
    pub fn whole(source: &'a Source, seed: u64, steps: &[PipelineStep]) -> Self {
        CorpusPart { source, seed, part: Partition::WHOLE, seen: Seen::for_steps(steps) }
    }
}

/// Streams the input through `steps` on `threads` workers and calls `consume` with every
/// outcome in input order. `dedup` and `near_dedup` decide here, in order, so the first occurrence
/// wins whatever the thread count. Returns the bytes of document text read.
pub fn process(
    input: CorpusPart,
    steps: &[PipelineStep],
    threads: usize,
    on_total: &(dyn Fn(Total) + Sync),
    mut consume: impl FnMut(Outcome) -> Result<()>,
) -> Result<u64> {
    process_with(input, steps, threads, on_total, &|_: &Document| (), |outcome, _| consume(outcome))
}

/// As [`process`], and `measure` runs on the workers for every document the steps keep; its
/// result comes with the outcome (`None` for rejects, dedup's and near_dedup's included). Work that reads each
/// kept document's text belongs here rather than on the ordered consumer thread.
pub fn process_with<M: Send>(
    input: CorpusPart,
    steps: &[PipelineStep],
    threads: usize,
    on_total: &(dyn Fn(Total) + Sync),
    measure: &(dyn Fn(&Document) -> M + Sync),
    consume: impl FnMut(Outcome, Option<M>) -> Result<()>,
) -> Result<u64> {
    Ok(stream(input, steps, threads, on_total, measure, consume)?.0)
}

/// As [`process_with`], and returns what the ordered stage saw (a scan's recorded keys).
pub fn stream<M: Send>(
    input: CorpusPart,
    steps: &[PipelineStep],
    threads: usize,
    on_total: &(dyn Fn(Total) + Sync),
    measure: &(dyn Fn(&Document) -> M + Sync),
    mut consume: impl FnMut(Outcome, Option<M>) -> Result<()>,
) -> Result<(u64, Seen)> {
    let threads = threads.max(1);
    let slots_n = threads * 4;
    let (work_tx, work_rx) = bounded::<(u64, Vec<SourceItem>)>(slots_n);
    let (done_tx, done_rx) = bounded::<(u64, Vec<Result<Processed<M>>>)>(slots_n);
    let (slot_tx, slot_rx) = bounded::<()>(slots_n);
    for _ in 0..slots_n {
        slot_tx.send(()).expect("fresh channel has room");
    }
    let CorpusPart { source, seed, part, mut seen } = input;
    std::thread::scope(|scope| -> Result<(u64, Seen)> {
        let reader = scope.spawn(move || -> Result<u64> {
            let mut b = Batcher {
                batch: Vec::new(),
                bytes: 0,
                seq: 0,
                work: &work_tx,
                slots: &slot_rx,
                on_total,
                text_bytes: 0,
                workers: threads,
            };
            source.read(seed, part, &mut b)?;
            b.send()?;
            Ok(b.text_bytes)
        });
        for _ in 0..threads {
            let (work_rx, done_tx) = (work_rx.clone(), done_tx.clone());
            scope.spawn(move || {
                for (seq, batch) in work_rx {
                    let out: Vec<Result<Processed<M>>> =
                        batch.into_iter().map(|item| run_steps(steps, item, measure)).collect();
                    if done_tx.send((seq, out)).is_err() {
                        return;
                    }
                }
            });
        }
        drop((work_rx, done_tx));
        let mut pending: BTreeMap<u64, Vec<Result<Processed<M>>>> = BTreeMap::new();
        let mut next = 0u64;
        let mut consumed: Result<()> = Ok(());
        let mut read_by_workers = 0u64;
        'outer: for (seq, batch) in done_rx.iter() {
            pending.insert(seq, batch);
            while let Some(batch) = pending.remove(&next) {
                next += 1;
                for p in batch {
                    // A file a worker could not read stops the run as a consumer error does.
                    let done = p.and_then(|mut p| {
                        read_by_workers += p.read_bytes;
                        let measured = p.measured.take();
                        let outcome = resolve_ordered(&mut seen, p);
                        let measured = if matches!(outcome, Outcome::Kept(_)) { measured } else { None };
                        consume(outcome, measured)
                    });
                    if let Err(e) = done {
                        consumed = Err(e);
                        break 'outer;
                    }
                }
                let _ = slot_tx.send(());
            }
        }
        // On a consumer error, closing our ends lets the reader and workers wind down.
        drop(done_rx);
        drop(slot_tx);
        let read = reader.join().map_err(|_| anyhow!("the source reader panicked"))?;
        consumed?;
        Ok((read? + read_by_workers, seen))
    })
}

fn resolve_ordered<M>(seen: &mut Seen, p: Processed<M>) -> Outcome {
    let Processed { outcome, order_keys, original, .. } = p;
    if order_keys.is_empty() {
        return outcome;
    }
    let id = match &outcome {
        Outcome::Kept(d) => d.id.as_str(),
        Outcome::Rejected(r) => r.id.as_str(),
    };
    let Some((step, reason)) = seen.resolve(order_keys, id) else {
        return outcome;
    };
    match outcome {
        Outcome::Kept(d) => Outcome::Rejected(Rejected {
            id: d.id,
            split: d.split,
            step: step.into(),
            reason,
            origin: d.origin,
            text: original.unwrap_or(d.text),
            input_bytes: d.input_bytes,
        }),
        // Rejected by a later step, but a duplicate first: the ordered step ran before that step.
        Outcome::Rejected(r) => Outcome::Rejected(Rejected { step: step.into(), reason, ..r }),
    }
}
