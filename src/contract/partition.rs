//! The part of the input one process of a task array reads.

use std::ops::Range;

/// Which part of the input a reader takes: task `index` of `count` gets the `index`-th of
/// `count` contiguous, near-equal ranges of the source's units (files of a folder, entries of
/// a tarball, row groups of Parquet files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl Partition {
    /// Everything: what a single process reads.
    pub const WHOLE: Partition = Partition { index: 0, count: 1 };

    pub fn is_whole(&self) -> bool {
        self.count <= 1
    }

    /// This part's units out of `n`: `[⌊i·n/N⌋, ⌊(i+1)·n/N⌋)`.
    pub fn range(&self, n: usize) -> Range<usize> {
        let (i, c, n) = (self.index as u128, self.count.max(1) as u128, n as u128);
        ((i * n / c) as usize)..(((i + 1) * n / c) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_tile_the_input_in_order() {
        for n in [0usize, 1, 2, 5, 7, 100, 1001] {
            for count in 1..=9u32 {
                let mut next = 0;
                for index in 0..count {
                    let r = Partition { index, count }.range(n);
                    assert_eq!(r.start, next, "n {n} count {count} index {index}");
                    assert!(r.len() <= n / count as usize + 1);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
        assert_eq!(Partition::WHOLE.range(17), 0..17);
    }
}
