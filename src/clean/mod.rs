//! Cleaning steps. Each step is one struct that is both its YAML configuration and the code
//! that runs, behind the small [`crate::contract::Step`] trait.

pub mod dedup;
pub mod filter;
pub mod html;
pub mod lowercase;
pub mod minhash;
pub mod near_dedup;
pub mod noise;
pub mod punct;
pub mod unicode;

pub use dedup::Dedup;
pub use filter::Filter;
pub use html::HtmlStrip;
pub use lowercase::Lowercase;
pub use near_dedup::NearDedup;
pub use noise::NoiseScore;
pub use punct::Punctuation;
pub use unicode::UnicodeNormalize;
