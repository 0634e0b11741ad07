//! A synthetic corpus in the aclImdb layout, realistic enough to exercise every cleaning step:
//! `<br />` breaks, entities, curly quotes, accents, shouting, repeated punctuation, duplicates,
//! and a long tail of review lengths (log-normal, median ~174 words). Used for the bundled
//! sample (`examples/gen_aclimdb.rs`), the tests and the benchmarks. Deterministic for a seed.

pub use crate::rng::Rng;

const TITLES: &[&str] = &[
    "Amélie",
    "The Godfather",
    "Casablanca",
    "Pokémon: The First Movie",
    "Night of the Living Dead",
    "Zoë's Café",
    "The Naïve Detective",
    "Citizen Kane",
    "Plan 9 from Outer Space",
    "Señor Wences",
    "Crème Brûlée",
    "Vertigo",
    "The Room",
    "Manos: The Hands of Fate",
    "Das Boot",
    "Rashōmon",
    "Le Mépris",
    "Troll 2",
];
const ACTORS: &[&str] = &[
    "Bette Davis",
    "Peter Lorre",
    "Gérard Depardieu",
    "Penélope Cruz",
    "Bela Lugosi",
    "Renée Zellweger",
    "Tommy Wiseau",
    "Audrey Tautou",
    "Ed Wood",
    "Zoë Kravitz",
    "Antonio Banderas",
    "Chloë Sevigny",
];
const POS: &[&str] = &[
    "brilliant",
    "wonderful",
    "moving",
    "gripping",
    "superb",
    "touching",
    "hilarious",
    "beautifully shot",
    "masterful",
    "charming",
    "unforgettable",
    "a real gem",
    "clever",
    "haunting",
];
const NEG: &[&str] = &[
    "awful",
    "boring",
    "a waste of time",
    "painful",
    "dreadful",
    "laughable",
    "incoherent",
    "badly acted",
    "tedious",
    "insulting",
    "a mess",
    "unwatchable",
    "forgettable",
    "cheap",
];
const NEUTRAL: &[&str] = &[
    "The plot follows a family who moves to a small town after the war.",
    "I saw this on late-night television years ago and finally tracked down a copy.",
    "The director clearly had a vision, whatever you think of the result.",
    "There is a subplot about a missing brother that never quite resolves.",
    "The soundtrack was composed by a local band and it shows.",
    "Most of the film takes place in a single apartment over one weekend.",
    "My friends and I watched it together on a rainy Sunday afternoon.",
    "It runs a little over two hours, and you feel every minute of it.",
    "The special effects are of their time, but that is part of the charm.",
    "Some scenes were apparently improvised on the spot by the cast.",
    "The ending will divide audiences, as these endings always do.",
    "It was remade in the nineties with a much bigger budget.",
];

fn sentence(rng: &mut Rng, positive: Option<bool>) -> String {
    let title = rng.pick(TITLES);
    let actor = rng.pick(ACTORS);
    let good = positive.unwrap_or_else(|| rng.chance(0.5));
    let adj = if good { rng.pick(POS) } else { rng.pick(NEG) };
    match rng.below(9) {
        0 => format!("{title} is simply {adj}."),
        1 => format!("{actor} gives a performance that is {adj} from start to finish."),
        2 => format!("I thought the script was {adj}, and the pacing matched it."),
        3 => format!("Honestly, the whole thing felt {adj} to me."),
        4 => format!("If you liked {title}, you will find this {adj} as well."),
        5 => format!(
            "The camera work is {adj} and the score is just as {}.",
            if good { rng.pick(POS) } else { rng.pick(NEG) }
        ),
        6 => format!("My rating says it all: {} out of 10.", if good { 7 + rng.below(4) } else { 1 + rng.below(4) }),
        _ => rng.pick(NEUTRAL).to_string(),
    }
}

/// Adds the quirks real reviews have.
fn decorate(rng: &mut Rng, s: String) -> String {
    let mut s = s;
    if rng.chance(0.08) {
        s = s.to_uppercase();
    }
    if rng.chance(0.10) {
        s = s.trim_end_matches('.').to_string() + rng.pick(&["!!!", "!!", "?!?", "....", "…", "!!!!!!", "???"]);
    }
    if rng.chance(0.06) {
        s = s.replace(" is ", " is &quot;really&quot; ").replace(" and ", " &amp; ");
    }
    if rng.chance(0.06) {
        s = format!("\u{201C}{}\u{201D}", s.trim_end_matches('.')) + ".";
    }
    if rng.chance(0.05) {
        s = s.replace("I ", "I\u{2019}ve said it before: I ");
    }
    if rng.chance(0.03) {
        s = s.replace(" the ", " the <i>") + "</i>";
    }
    if rng.chance(0.02) {
        s.push_str(" Caf&eacute; scenes were the best &#8212; trust me &#39;cause I know.");
    }
    if rng.chance(0.01) {
        s.push_str(" I rated it 3 < 5 and my wife rated it 9 > 7.");
    }
    if rng.chance(0.005) {
        s.push_str(" Best film ever 😀👍.");
    }
    if rng.chance(0.004) {
        s.push_str(" The subtitles said cafÃ© and â€œniceâ€ all the way through.");
    }
    s
}

pub fn review(rng: &mut Rng, positive: Option<bool>) -> String {
    // Log-normal word count: median ~174 words, a long tail past 2,000.
    let words_target = (174.0 * (0.75 * rng.normal()).exp()).clamp(10.0, 2600.0) as usize;
    let shouting = rng.chance(0.02);
    let mut paragraphs: Vec<String> = Vec::new();
    let mut words = 0;
    let mut para = String::new();
    while words < words_target {
        let plain = sentence(rng, positive);
        let s = decorate(rng, plain);
        words += s.split_whitespace().count();
        if !para.is_empty() {
            para.push(' ');
        }
        para.push_str(&s);
        if rng.chance(0.18) {
            paragraphs.push(std::mem::take(&mut para));
        }
    }
    if !para.is_empty() {
        paragraphs.push(para);
    }
    let text = paragraphs.join("<br /><br />");
    if shouting {
        text.to_uppercase().replace("<BR />", "<br />")
    } else {
        text
    }
}

/// Every file of a corpus with `per_label` reviews in each of train/test × neg/pos and `unsup`
/// unlabelled ones, as (`aclImdb/...` path, bytes), in a fixed order.
pub fn corpus(per_label: usize, unsup: usize, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(seed);
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for split in ["train", "test"] {
        for (label, positive) in [("neg", Some(false)), ("pos", Some(true)), ("unsup", None)] {
            let n = match (split, label) {
                ("test", "unsup") => continue,
                (_, "unsup") => unsup,
                _ => per_label,
            };
            let mut earlier: Vec<String> = Vec::new();
            let mut urls = String::new();
            for id in 0..n {
                let text = if !earlier.is_empty() && rng.chance(0.02) {
                    earlier[rng.below(earlier.len())].clone() // verbatim duplicate
                } else {
                    review(&mut rng, positive)
                };
                let rating = match positive {
                    Some(true) => 7 + rng.below(4),
                    Some(false) => 1 + rng.below(4),
                    None => 0,
                };
                files.push((format!("aclImdb/{split}/{label}/{id}_{rating}.txt"), text.clone().into_bytes()));
                if earlier.len() < 64 {
                    earlier.push(text);
                }
                urls.push_str(&format!("http://www.imdb.com/title/tt{:07}/usercomments\n", 100000 + rng.below(900000)));
            }
            files.push((format!("aclImdb/{split}/urls_{label}.txt"), urls.into_bytes()));
        }
        files.push((format!("aclImdb/{split}/labeledBow.feat"), b"0:9 1:1 2:4 3:2\n".to_vec()));
    }
    files.push(("aclImdb/train/unsupBow.feat".into(), b"0:3 1:1\n".to_vec()));
    files.push(("aclImdb/imdb.vocab".into(), b"the\nand\na\nof\nto\nis\n".to_vec()));
    files.push(("aclImdb/imdbEr.txt".into(), b"0.0490972013402\n0.201363575849\n".to_vec()));
    files.push((
        "aclImdb/README".into(),
        b"Synthetic reviews in the layout of the Large Movie Review Dataset v1.0 (Maas et al., 2011).\nGenerated by bertpipe's examples/gen_aclimdb.rs; no real IMDb text.\n".to_vec(),
    ));
    files
}

/// A document of [`near_duplicate_corpus`]; a planted copy names the earlier document it was
/// made from and the share of its words that were changed.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantedDoc {
    pub id: String,
    pub text: String,
    /// The index of the document this one copies (itself perhaps a copy: chains are planted too).
    pub copy_of: Option<usize>,
    pub changed: f64,
}

/// The shares of words a planted copy changes, and the 5-shingle Jaccard similarity each gives
/// about: 0 (1.0: the same words), 1% (~0.90), 2% (~0.82), 4% (~0.67), 8% (~0.45), 30% (~0.1).
pub const PLANTED_CHANGES: [f64; 6] = [0.0, 0.01, 0.02, 0.04, 0.08, 0.30];

/// `n` documents for testing near-duplicate detection: reviews as [`review`] writes them, and
/// among them (a share `copies` of all documents) near copies of an earlier document, each
/// with a share of its words, drawn from [`PLANTED_CHANGES`], replaced by words no review uses.
/// Ids are `doc-N`. Deterministic for a seed.
pub fn near_duplicate_corpus(n: usize, copies: f64, seed: u64) -> Vec<PlantedDoc> {
    let mut rng = Rng::for_key(seed, &[0x6e65_6172]);
    let mut docs: Vec<PlantedDoc> = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("doc-{i}");
        if i > 0 && rng.chance(copies) {
            let of = rng.below(i);
            let changed = PLANTED_CHANGES[rng.below(PLANTED_CHANGES.len())];
            let mut words: Vec<String> = docs[of].text.split(' ').map(String::from).collect();
            let k = (changed * words.len() as f64).ceil() as usize;
            for _ in 0..k {
                let at = rng.below(words.len());
                words[at] = format!("zq{}", rng.below(1_000_000_000));
            }
            docs.push(PlantedDoc { id, text: words.join(" "), copy_of: Some(of), changed });
        } else {
            docs.push(PlantedDoc { id, text: review(&mut rng, None), copy_of: None, changed: 0.0 });
        }
    }
    docs
}
