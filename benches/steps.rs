//! Throughput of each cleaning step on its own, over a generated IMDb-sized set of reviews held
//! in memory (no I/O): median of 5 runs, MB/s of input text, single thread; then the WordPiece
//! path against the `tokenizers` crate on the cleaned text.
//!
//! `cargo bench --bench steps` (set BENCH_REVIEWS to change the 50,000).

use std::time::Instant;

use bertpipe::clean::{Dedup, Filter, HtmlStrip, Lowercase, NoiseScore, Punctuation, UnicodeNormalize};
use bertpipe::config::PipelineStep;
use bertpipe::contract::document::Document;
use bertpipe::synth::{review, Rng};

fn main() {
    let n: usize = std::env::var("BENCH_REVIEWS").ok().and_then(|v| v.parse().ok()).unwrap_or(50_000);
    let mut rng = Rng(7);
    let raw: Vec<String> = (0..n).map(|i| review(&mut rng, Some(i % 2 == 0))).collect();
    let bytes: usize = raw.iter().map(String::len).sum();
    println!("{n} reviews, {:.1} MB", bytes as f64 / 1e6);
    // Each step sees the text as the preceding steps of the default pipeline leave it.
    let steps: Vec<PipelineStep> = vec![
        PipelineStep::HtmlStrip(HtmlStrip { block_breaks: true }),
        PipelineStep::UnicodeNormalize(UnicodeNormalize::default()),
        PipelineStep::Punctuation(Punctuation::default()),
        PipelineStep::Lowercase(Lowercase {}),
        PipelineStep::NoiseScore(NoiseScore::default()),
        PipelineStep::Filter(Filter { min_words: Some(3), max_noise: Some(15.0), ..Default::default() }),
        PipelineStep::Dedup(Dedup::default()),
    ];
    let mut docs: Vec<Document> =
        raw.into_iter().map(|text| Document { text, split: "train".into(), ..Default::default() }).collect();
    println!("{:<20} {:>10} {:>10}", "step", "median s", "MB/s");
    for step in &steps {
        let input_bytes: usize = docs.iter().map(|d| d.text.len()).sum();
        let mut times = Vec::new();
        let mut last = Vec::new();
        for _ in 0..5 {
            let mut work = docs.clone();
            let t = Instant::now();
            for d in &mut work {
                std::hint::black_box(step.as_step().apply(d));
            }
            times.push(t.elapsed().as_secs_f64());
            last = work;
        }
        times.sort_by(f64::total_cmp);
        let median = times[2];
        println!("{:<20} {:>10.4} {:>10.1}", step.type_name(), median, input_bytes as f64 / 1e6 / median);
        docs = last;
    }
    words_vs_split_whitespace(&docs);
    tokenizer_vs_crate(&docs);
}

/// `count_words` (the filter's and stats' word count) against `split_whitespace().count()`, which
/// it must equal, on the cleaned texts.
fn words_vs_split_whitespace(docs: &[Document]) {
    let bytes: usize = docs.iter().map(|d| d.text.len()).sum();
    let time = |f: &dyn Fn(&str) -> usize| {
        let mut runs: Vec<(f64, usize)> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let n: usize = docs.iter().map(|d| f(std::hint::black_box(&d.text))).sum();
                (t.elapsed().as_secs_f64(), n)
            })
            .collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[2]
    };
    let (ours, n_ours) = time(&bertpipe::clean::filter::count_words);
    let (std_, n_std) = time(&|t: &str| t.split_whitespace().count());
    assert_eq!(n_ours, n_std, "word counts differ");
    let non_ascii = docs.iter().filter(|d| !d.text.is_ascii()).count();
    println!(
        "count_words {:.0} MB/s vs split_whitespace {:.0} MB/s: {:.1}x ({n_ours} words, {non_ascii} of {} texts not ASCII)",
        bytes as f64 / 1e6 / ours,
        bytes as f64 / 1e6 / std_,
        std_ / ours,
        docs.len()
    );
}

/// The `tokenize` step's WordPiece path against the `tokenizers` crate's encoder (the parity
/// reference) on the same cleaned texts, one thread each.
fn tokenizer_vs_crate(docs: &[Document]) {
    use tokenizers::models::wordpiece::WordPiece as HfWordPiece;
    use tokenizers::normalizers::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    let vocab = concat!(env!("CARGO_MANIFEST_DIR"), "/data/vocab/bert-base-uncased.txt");
    let ours = bertpipe::tokenize::WordPiece::from_vocab_file(vocab.as_ref(), true, None, 100).unwrap();
    let mut hf = tokenizers::Tokenizer::new(HfWordPiece::from_file(vocab).unk_token("[UNK]".into()).build().unwrap());
    hf.with_normalizer(Some(BertNormalizer::new(true, true, None, true))).unwrap();
    hf.with_pre_tokenizer(Some(BertPreTokenizer));
    let bytes: usize = docs.iter().map(|d| d.text.len()).sum();
    let median = |runs: usize, f: &mut dyn FnMut() -> usize| {
        let mut t: Vec<(f64, usize)> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                let n = f();
                (start.elapsed().as_secs_f64(), n)
            })
            .collect();
        t.sort_by(|a, b| a.0.total_cmp(&b.0));
        t[runs / 2]
    };
    let (t_ours, n_ours) = median(5, &mut || {
        let mut ids = Vec::new();
        let mut n = 0;
        for d in docs {
            ids.clear();
            ours.encode(&d.text, &mut ids);
            n += ids.len();
        }
        n
    });
    // The crate needs ~40 s a pass here: one run.
    let (t_hf, n_hf) =
        median(1, &mut || docs.iter().map(|d| hf.encode_fast(d.text.as_str(), false).unwrap().len()).sum());
    assert_eq!(n_ours, n_hf, "token counts differ");
    println!("{:<20} {:>10.4} {:>10.1}   ({n_ours} tokens)", "wordpiece (ours)", t_ours, bytes as f64 / 1e6 / t_ours);
    println!(
        "{:<20} {:>10.4} {:>10.1}   tokenizers crate encode_fast",
        "wordpiece (crate)",
        t_hf,
        bytes as f64 / 1e6 / t_hf
    );
    println!("speed-up over the crate: {:.1}x", t_hf / t_ours);
}
