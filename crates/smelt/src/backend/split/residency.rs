//! Which devices hold a tensor's current bytes.
//!
//! A tensor of a layer split may have a copy on several devices; an op on
//! one device changes only that copy. Ops address the first bytes of a
//! tensor (views are prefixes: `Tensor::with_rows`, `reshape`), so a write
//! of `n` bytes makes `[0, n)` current on its device alone and leaves the
//! rest as it was. The state is a list of byte ranges, each with the set of
//! devices whose copy of that range is current; a range held by none may
//! be read as anything.

/// A set of devices, bit `d` for device `d` (a split has at most 64).
pub type Devices = u64;

pub fn device_bit(d: usize) -> Devices {
    1 << d
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Residency {
    /// `(end, holders)` in order of `end`: range `[previous end, end)` is
    /// current on `holders`; the last `end` is the tensor's size.
    ranges: Vec<(u64, Devices)>,
}

impl Residency {
    /// All `size` bytes current on `holders` (a fresh zero-filled tensor,
    /// or a weight uploaded to each of them).
    pub fn new(size: u64, holders: Devices) -> Self {
        Self {
            ranges: vec![(size, holders)],
        }
    }

    pub fn size(&self) -> u64 {
        self.ranges.last().map_or(0, |r| r.0)
    }

    /// Whether `d` holds all of `[0, len)` that any device holds.
    pub fn holds(&self, d: usize, len: u64) -> bool {
        self.within(len)
            .all(|(_, _, held)| held == 0 || held & device_bit(d) != 0)
    }

    /// A device holding all of `[0, len)` that any device holds, `prefer`
    /// if it does.
    pub fn holder_of(&self, len: u64, prefer: usize) -> Option<usize> {
        let all = self
            .within(len)
            .filter(|&(_, _, held)| held != 0)
            .fold(!0, |acc, (_, _, held)| acc & held);
        if all & device_bit(prefer) != 0 {
            Some(prefer)
        } else if all != 0 {
            Some(all.trailing_zeros() as usize)
        } else {
            None
        }
    }

    /// The ranges within `[0, len)`: `(start, end, holders)`.
    pub fn within(&self, len: u64) -> impl Iterator<Item = (u64, u64, Devices)> + '_ {
        let starts = std::iter::once(0).chain(self.ranges.iter().map(|r| r.0));
        starts
            .zip(&self.ranges)
            .take_while(move |(start, _)| *start < len)
            .map(move |(start, &(end, held))| (start, end.min(len), held))
    }

    /// `[0, len)` now current on `holders` alone (a write).
    pub fn set(&mut self, len: u64, holders: Devices) {
        self.split_at(len);
        self.ranges.retain(|r| r.0 > len);
        self.ranges.insert(0, (len, holders));
        self.merge();
    }

    /// `d` now holds `[0, len)` as well (a copy to it).
    pub fn add(&mut self, d: usize, len: u64) {
        self.split_at(len);
        for r in self.ranges.iter_mut().take_while(|r| r.0 <= len) {
            r.1 |= device_bit(d);
        }
        self.merge();
    }

    /// Makes `at` (within the size) the end of a range.
    fn split_at(&mut self, at: u64) {
        if at == 0 || at >= self.size() {
            return;
        }
        let i = self.ranges.partition_point(|r| r.0 < at);
        if self.ranges[i].0 != at {
            let held = self.ranges[i].1;
            self.ranges.insert(i, (at, held));
        }
    }

    fn merge(&mut self) {
        self.ranges.retain(|r| r.0 > 0);
        let mut i = 1;
        while i < self.ranges.len() {
            if self.ranges[i].1 == self.ranges[i - 1].1 {
                self.ranges.remove(i - 1);
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Devices = 1;
    const B: Devices = 2;

    #[test]
    fn a_write_moves_its_prefix_and_keeps_the_rest() {
        let mut r = Residency::new(100, A | B);
        r.set(40, B);
        assert_eq!(r.ranges, vec![(40, B), (100, A | B)]);
        assert!(r.holds(1, 100));
        assert!(!r.holds(0, 10));
        assert!(r.holds(0, 0));
        assert_eq!(r.holder_of(100, 0), Some(1));
        r.set(10, A);
        assert_eq!(r.ranges, vec![(10, A), (40, B), (100, A | B)]);
        assert_eq!(r.holder_of(10, 1), Some(0));
        assert_eq!(r.holder_of(40, 0), None);
        let within: Vec<_> = r.within(50).collect();
        assert_eq!(within, vec![(0, 10, A), (10, 40, B), (40, 50, A | B)]);
    }

    #[test]
    fn a_copy_adds_a_holder_and_ranges_merge() {
        let mut r = Residency::new(100, A);
        r.set(40, B);
        r.add(0, 40);
        assert_eq!(r.ranges, vec![(40, A | B), (100, A)]);
        r.add(1, 100);
        assert_eq!(r.ranges, vec![(100, A | B)]);
        r.set(100, A);
        r.add(1, 30);
        assert_eq!(r.ranges, vec![(30, A | B), (100, A)]);
        assert!(r.holds(1, 30) && !r.holds(1, 31));
    }

    #[test]
    fn bytes_held_by_none_need_no_copy() {
        let mut r = Residency::new(64, A);
        r.set(32, 0);
        assert!(r.holds(1, 32));
        assert!(!r.holds(1, 33));
        assert_eq!(r.holder_of(64, 1), Some(0));
        assert_eq!(r.holder_of(32, 1), Some(1));
        r.set(64, B);
        assert_eq!(r.ranges, vec![(64, B)]);
    }
}
