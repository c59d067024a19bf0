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
    /// length is a power of two (or 0 before the first route).
    slots: Vec<Slot>,
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
        let mut i = hash(word, len, mask);
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
        self.slots = vec![Slot::default(); size];
        let mut first = 0;
        while first < self.order.len() {
            let (word, len, _) = self.order[first];
            let end = first
                + self.order[first..]
                    .iter()
                    .take_while(|&&(w, n, _)| (w, n) == (word, len))
                    .count();
            let mut i = hash(word, len, mask);
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

/// A slot for the key: Fibonacci hashing, whose top bits mix every input bit.
#[inline]
fn hash(word: u64, len: usize, mask: usize) -> usize {
    let mixed = (word ^ (len as u64).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 32) as usize & mask
}
