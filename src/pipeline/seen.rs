//! What the ordered stage remembers of earlier documents, for the steps whose verdict depends
//! on them: `dedup`'s fingerprints and `near_dedup`'s signatures. Workers compute the keys
//! ([`OrderKey`]); here they are decided one document at a time, in input order.

use crate::clean::dedup::DedupIndex;
use crate::clean::near_dedup::{self, NearIndex};
use crate::config::PipelineStep;
use crate::contract::document::OrderKey;

/// The earlier documents' keys: a single run starts empty; a task of an array starts with
/// what the tasks before it kept (from their scans).
#[derive(Debug)]
pub struct Seen {
    exact: DedupIndex,
    near: Option<NearIndex>,
    /// A task's scan decides nothing: it records every document's keys, in input order, for the
    /// tasks after it to decide with.
    recorded: Option<Vec<(String, Vec<OrderKey>)>>,
}

impl Seen {
    /// Nothing seen yet, for a pipeline with these steps.
    pub fn for_steps(steps: &[PipelineStep]) -> Seen {
        let near = steps.iter().find_map(|s| match s {
            PipelineStep::NearDedup(n) => Some(NearIndex::new(&n.params())),
            _ => None,
        });
        Seen { exact: DedupIndex::default(), near, recorded: None }
    }

    /// Records every document's keys and decides nothing (a task's scan).
    pub fn recording() -> Seen {
        Seen { exact: DedupIndex::default(), near: None, recorded: Some(Vec::new()) }
    }

    /// What [`Seen::recording`] recorded: `(id, keys)` in input order.
    pub fn into_recorded(self) -> Vec<(String, Vec<OrderKey>)> {
        self.recorded.unwrap_or_default()
    }

    /// Decides one document's keys, in step order. The first key that finds an earlier
    /// document rejects it: that step's name and the reason are returned, and the keys after
    /// it are not recorded (the document never reached those steps). Otherwise every key is
    /// recorded as the first of its kind.
    pub fn resolve(&mut self, keys: Vec<OrderKey>, id: &str) -> Option<(&'static str, String)> {
        if let Some(recorded) = &mut self.recorded {
            recorded.push((id.to_string(), keys));
            return None;
        }
        for key in &keys {
            match key {
                OrderKey::Exact(k) => {
                    if let Some(first) = self.exact.check(*k, id) {
                        return Some((key.step(), format!("duplicate_of:{first}")));
                    }
                }
                OrderKey::Near(k) => {
                    let index = self.near.as_mut().expect("a near_dedup key comes from a near_dedup step");
                    if let Some((first, s)) = index.check(k, id) {
                        return Some((key.step(), near_dedup::reason(first, s)));
                    }
                }
            }
        }
        None
    }
}
