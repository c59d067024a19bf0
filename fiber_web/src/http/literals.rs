//! The router's index of literal routes (`/hello`, `/widgets/parallel`): from a path's
//! first eight bytes and its length to the routes that may be it, in one hash probe
//! whatever the number of routes. The router confirms a longer path's bytes.

/// One (first word, length) key: the routes that have it are `order[first..end]`.
#[derive(Clone, Copy, Default)]
struct Slot {
    word: u64,
    len: usize,
    first: u32,
    /// 0 for an empty slot (a used one holds at least one route).
    end: u32,
}

/// Literal routes by first word and length.
#[derive(Clone, Default)]
pub(crate) struct Literals {
    /// (first word, length, route index), sorted by word and length and otherwise in
    /// the order added.
    order: Vec<(u64, usize, usize)>,
    /// Open addressing over the distinct keys of `order`, at most half full; its
    /// length is a power of two, 2 or more (or 0 before the first route).
    slots: Vec<Slot>,
    /// log2 of `slots.len()`.
    bits: u32,
}

impl Literals {
    /// Index route `route`, whose literal path has first word `word` and length `len`.
    pub(crate) fn insert(&mut self, word: u64, len: usize, route: usize) {
        let key = (word, len);
        let at = self.order.partition_point(|&(w, n, _)| (w, n) <= key);
        self.order.insert(at, (word, len, route));
        self.rebuild();
    }

    /// The routes with first word `word` and length `len`, as (word, length, route
    /// index) in the order added; empty when there are none.
    #[inline]
    pub(crate) fn get(&self, word: u64, len: usize) -> &[(u64, usize, usize)] {
        let Some(mask) = self.slots.len().checked_sub(1) else {
            return &[];
        };
        let mut i = hash(word, len, self.bits);
        loop {
            let slot = &self.slots[i];
            if slot.end == 0 {
                return &[];
            }
            if slot.word == word && slot.len == len {
                return &self.order[slot.first as usize..slot.end as usize];
            }
            i = (i + 1) & mask;
        }
    }

    /// The table for `order`, from scratch (routes are added once, at start).
    fn rebuild(&mut self) {
        let size = (self.order.len() * 2).next_power_of_two();
        let mask = size - 1;
        self.bits = size.trailing_zeros();
        self.slots = vec![Slot::default(); size];
        let mut first = 0;
        while first < self.order.len() {
            let (word, len, _) = self.order[first];
            let end = first
                + self.order[first..]
                    .iter()
                    .take_while(|&&(w, n, _)| (w, n) == (word, len))
                    .count();
            let mut i = hash(word, len, self.bits);
            while self.slots[i].end != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = Slot {
                word,
                len,
                first: u32::try_from(first).expect("fewer than 2^32 routes"),
                end: u32::try_from(end).expect("fewer than 2^32 routes"),
            };
            first = end;
        }
    }
}

/// A slot for the key among `1 << bits`: Fibonacci hashing, keeping the product's top
/// `bits` bits, which every bit of the key reaches (the low half's bits would ignore the
/// key's high bytes, and `/api/users` and `/api/posts` would share a slot).
#[inline]
fn hash(word: u64, len: usize, bits: u32) -> usize {
    let mixed = (word ^ (len as u64).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // `bits` is at least 1 (a table has two slots or more), so the shift is below 64.
    (mixed >> (64 - bits)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index's answer for `path`, as route indexes.
    fn routes(index: &Literals, path: &str) -> Vec<usize> {
        let mut word = [0u8; 8];
        let n = path.len().min(8);
        word[..n].copy_from_slice(&path.as_bytes()[..n]);
        let found = index.get(u64::from_le_bytes(word), path.len());
        found.iter().map(|&(_, _, route)| route).collect()
    }

    #[test]
    fn keys_that_differ_only_in_their_high_bytes_spread_over_the_table() {
        // Same length, same first five bytes: only bytes 5-7 tell them apart.
        let paths: Vec<String> = (0..64).map(|i| format!("/api{:04}", i * 7)).collect();
        let mut index = Literals::default();
        for (i, path) in paths.iter().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(path.as_bytes());
            index.insert(u64::from_le_bytes(word), path.len(), i);
        }
        let bits = index.slots.len().trailing_zeros();
        let slots: std::collections::HashSet<usize> = index
            .order
            .iter()
            .map(|&(w, n, _)| hash(w, n, bits))
            .collect();
        assert!(slots.len() >= 32, "64 keys in {} home slots", slots.len());
        // Every key is found through its probe chain, collisions and all.
        for (i, path) in paths.iter().enumerate() {
            assert_eq!(routes(&index, path), [i], "{path}");
        }
        assert!(routes(&index, "/api9999").is_empty());
    }
}
