//! The prepared statements a connection keeps, by their SQL: looked up on every
//! `exec`, so the lookup is a short hash of the text (the SQL is the application's
//! own, never a client's, so a hash that an attacker could flood does not matter
//! here) and what the statement needs at each execution is kept beside its id: its
//! result's columns, and whether its text names session state the server does not
//! report (session.rs), worked out once.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mysql_common::packets::Column;

/// A prepared statement the connection keeps.
#[derive(Debug, Clone)]
pub(crate) struct StmtInfo {
    /// The server's statement id.
    pub(crate) id: u32,
    /// How many parameters it takes.
    pub(crate) num_params: u16,
    /// The columns of its result, as the prepare (or, since, an execution that sent
    /// them again) described them; `None` for a statement without a result set.
    /// With MariaDB's metadata caching an execution sends no column definitions
    /// unless they changed, and its rows are read with these.
    pub(crate) columns: Option<Arc<[Column]>>,
    /// Its text names state the server's session tracker does not report
    /// (`session::names_untracked_state`).
    pub(crate) untracked: bool,
    /// When it was last prepared or found: the cache's clock then.
    used: u64,
}

impl StmtInfo {
    pub(crate) fn new(
        id: u32,
        num_params: u16,
        columns: Option<Arc<[Column]>>,
        untracked: bool,
    ) -> StmtInfo {
        StmtInfo {
            id,
            num_params,
            columns,
            untracked,
            used: 0,
        }
    }
}

/// The statements, least recently used first out.
#[derive(Debug, Default)]
pub(crate) struct StmtCache {
    by_sql: HashMap<Box<str>, StmtInfo, BuildHasherDefault<SqlHasher>>,
    /// Lookups and insertions so far: the clock of the LRU order.
    clock: u64,
}

impl StmtCache {
    /// The statement prepared for `sql`, now the most recently used.
    pub(crate) fn get(&mut self, sql: &str) -> Option<&mut StmtInfo> {
        self.clock += 1;
        let clock = self.clock;
        let stmt = self.by_sql.get_mut(sql)?;
        stmt.used = clock;
        Some(stmt)
    }

    /// Keeps `stmt`, prepared for `sql`, as the most recently used.
    pub(crate) fn insert(&mut self, sql: &str, mut stmt: StmtInfo) {
        self.clock += 1;
        stmt.used = self.clock;
        self.by_sql.insert(sql.into(), stmt);
    }

    /// Takes out the statement used longest ago.
    pub(crate) fn take_least_recently_used(&mut self) -> Option<StmtInfo> {
        let oldest = self
            .by_sql
            .iter()
            .min_by_key(|(_, s)| s.used)
            .map(|(sql, _)| sql.clone())?;
        self.by_sql.remove(&oldest)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_sql.len()
    }

    /// Forgets every statement (the server dropped them: a reset).
    pub(crate) fn clear(&mut self) {
        self.by_sql.clear();
    }
}

/// A multiply-rotate hash over eight bytes at a time: a statement's text is hashed
/// on every execution, and SipHash (std's default, made to resist flooding by
/// untrusted keys) cost more than the rest of the lookup.
#[derive(Default)]
pub(crate) struct SqlHasher(u64);

/// An odd constant with well-mixed bits (the golden ratio's fraction, 2^64 / phi).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl SqlHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(MIX);
    }
}

impl Hasher for SqlHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let mut word = [0; 8];
        word[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(word) ^ (rest.len() as u64) << 59);
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(id: u32) -> StmtInfo {
        StmtInfo::new(id, 0, None, false)
    }

    #[test]
    fn the_least_recently_used_statement_goes_first() {
        let mut cache = StmtCache::default();
        cache.insert("a", stmt(1));
        cache.insert("b", stmt(2));
        cache.insert("c", stmt(3));
        assert_eq!(cache.get("a").map(|s| s.id), Some(1));
        assert_eq!(cache.take_least_recently_used().map(|s| s.id), Some(2));
        assert_eq!(cache.take_least_recently_used().map(|s| s.id), Some(3));
        assert_eq!(cache.len(), 1);
        assert!(cache.get("b").is_none());
    }

    #[test]
    fn texts_differing_anywhere_hash_apart() {
        let hash = |s: &str| {
            let mut h = SqlHasher::default();
            h.write(s.as_bytes());
            h.finish()
        };
        let base = "SELECT id, randomNumber FROM World WHERE id = ?";
        let mut seen = std::collections::HashSet::new();
        seen.insert(hash(base));
        for i in 0..base.len() {
            let mut b = base.as_bytes().to_vec();
            b[i] ^= 1;
            assert!(
                seen.insert(hash(std::str::from_utf8(&b).unwrap())),
                "byte {i}"
            );
        }
        // Lengths differ too: trailing zero bytes change the hash.
        assert_ne!(hash("a"), hash("a\0"));
    }
}
