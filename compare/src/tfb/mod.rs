//! TechEmpower's six tests (json, plaintext, db, queries, fortunes, updates) on the
//! rig's two servers, to measure beside the fiber_web app that passes the same rules
//! (`examples/techempower.rs`): axum + mysql_async (`axum.rs`, what a tokio team would
//! write) and raw may_minihttp + fiber_mysql (`mini.rs`, may-minihttp's own TFB entry's
//! shape). What the three share is here: the rules' constants, the `queries` parameter,
//! the fortunes page, the tables (`examples/techempower.sql`).
//!
//! Each server runs as `compare tfb --runtime async|minihttp --bind ADDR`, with
//! `DATABASE_URL` naming a database that holds the tables (`--setup` makes them).

pub mod axum;
pub mod mini;

use std::fmt::Write as _;

/// The tables and their rows, one statement per paragraph.
pub const SETUP_SQL: &str = include_str!("../../../examples/techempower.sql");

/// The statements of [`SETUP_SQL`].
pub fn setup_statements() -> impl Iterator<Item = &'static str> {
    SETUP_SQL
        .split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `/json`'s message and `/plaintext`'s body.
pub const HELLO: &str = "Hello, World!";

/// The fortune every `/fortunes` adds before it sorts.
pub const ADDED_FORTUNE: &str = "Additional fortune added at request time.";

/// One row of `World`, as `/db`, `/queries` and `/updates` answer it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct World {
    pub id: i32,
    #[serde(rename = "randomNumber")]
    pub random_number: i32,
}

/// The rules' `queries`: a number from 1 to 500; missing, empty, zero or not a number
/// counts as 1, more than 500 as 500.
pub fn queries(query_string: &str) -> usize {
    let value = query_string
        .split('&')
        .find_map(|pair| pair.strip_prefix("queries="))
        .unwrap_or("");
    value.parse::<usize>().unwrap_or(1).clamp(1, 500)
}

/// A random `World` id (1 to 10,000), or random number.
pub fn random_id(rng: &mut fastrand_lite::Rng) -> i32 {
    rng.range(1, 10_001)
}

/// The ids to read for one `/queries` or `/updates` request.
pub fn random_ids(n: usize) -> Vec<i32> {
    let mut rng = fastrand_lite::Rng::new();
    (0..n).map(|_| random_id(&mut rng)).collect()
}

/// `UPDATE World SET randomNumber = CASE id WHEN ? THEN ? ... END WHERE id IN (?, ...)`
/// for `n` rows: one statement for a request's updates (the rules allow a batch), its
/// parameters from [`update_params`].
pub fn update_sql(n: usize) -> String {
    let mut sql = String::from("UPDATE World SET randomNumber = CASE id");
    for _ in 0..n {
        sql.push_str(" WHEN ? THEN ?");
    }
    sql.push_str(" ELSE randomNumber END WHERE id IN (");
    for i in 0..n {
        sql.push_str(if i == 0 { "?" } else { ",?" });
    }
    sql.push(')');
    sql
}

/// The parameters of [`update_sql`] for `worlds`, sorted by id (updates in one order in
/// every request, so that two requests cannot deadlock on each other's rows).
pub fn update_params(worlds: &[World]) -> Vec<i32> {
    let mut sorted = worlds.to_vec();
    sorted.sort_by_key(|w| w.id);
    let mut params: Vec<i32> = sorted
        .iter()
        .flat_map(|w| [w.id, w.random_number])
        .collect();
    params.extend(sorted.iter().map(|w| w.id));
    params
}

/// The fortunes page: `fortunes` (the table's rows) with [`ADDED_FORTUNE`], sorted by
/// message, every message escaped, in TechEmpower's layout.
pub fn fortunes_page(mut fortunes: Vec<(i32, String)>) -> String {
    fortunes.push((0, ADDED_FORTUNE.to_string()));
    fortunes.sort_by(|a, b| a.1.cmp(&b.1));
    let mut out = String::with_capacity(1200);
    out.push_str(
        "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>\
         <tr><th>id</th><th>message</th></tr>",
    );
    for (id, message) in &fortunes {
        let _ = write!(out, "<tr><td>{id}</td><td>");
        fiber_web::html::push_escaped_html(&mut out, message);
        out.push_str("</td></tr>");
    }
    out.push_str("</table></body></html>");
    out
}

/// A small, fast, non-cryptographic generator for ids (what TFB entries use: a
/// thread-local xorshift), so that no server pays for a CSPRNG per request.
pub mod fastrand_lite {
    use std::time::{SystemTime, UNIX_EPOCH};

    /// xorshift64*.
    pub struct Rng(u64);

    impl Rng {
        /// Seeded from the clock and a counter.
        pub fn new() -> Rng {
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            let seed = t ^ NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
            Rng(seed | 1)
        }

        /// The next value in `low..high`.
        pub fn range(&mut self, low: i32, high: i32) -> i32 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
            low + (x % (high - low) as u64) as i32
        }
    }

    impl Default for Rng {
        fn default() -> Self {
            Rng::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_counts_as_the_rules_say() {
        for (q, n) in [
            ("queries=5", 5),
            ("", 1),
            ("queries=", 1),
            ("queries=0", 1),
            ("queries=foo", 1),
            ("queries=501", 500),
            ("a=1&queries=20", 20),
        ] {
            assert_eq!(queries(q), n, "{q}");
        }
    }

    #[test]
    fn the_setup_has_its_six_statements_and_the_batch_update_its_parameters() {
        assert_eq!(setup_statements().count(), 6);
        let worlds = [
            World {
                id: 9,
                random_number: 1,
            },
            World {
                id: 2,
                random_number: 7,
            },
        ];
        assert_eq!(update_params(&worlds), [2, 7, 9, 1, 2, 9]);
        assert_eq!(update_sql(2).matches('?').count(), 6);
    }

    #[test]
    fn the_fortunes_page_is_sorted_and_escaped() {
        let page = fortunes_page(vec![(11, "<b>\"&'".into()), (1, "zz".into())]);
        assert!(page.contains("<tr><td>11</td><td>&lt;b&gt;&quot;&amp;&#39;</td></tr>"));
        let added = page.find(ADDED_FORTUNE).unwrap();
        assert!(page.find("&lt;b").unwrap() < added && added < page.find("zz").unwrap());
    }
}
