//! Whether a connection's session is still the one the pool opened, from what the
//! server reports, and the reset that makes it so again.
//!
//! A pooled connection serves one request after another. What a request leaves in
//! its session (a user variable holding a token, `sql_mode`, a temporary table, an
//! open transaction, a named lock) would be the next request's starting point. The
//! `mysql` crate and mysql_async send COM_RESET_CONNECTION at every give-back, which
//! also drops every prepared statement, so their statement cache starts empty at
//! every checkout. We reset only when the session may have changed, and keep the
//! statement cache otherwise.
//!
//! ## What the server reports
//! At connect we negotiate `CLIENT_SESSION_TRACK` and `CLIENT_DEPRECATE_EOF` (so that
//! every command, result sets included, ends in an OK packet with status flags) and
//! send `SET session_track_state_change = ON`. Then every OK packet says:
//! - `SERVER_SESSION_STATE_CHANGED`: the session's state changed. MariaDB 10.11 sets
//!   it for `SET @a = ..` (also inside a procedure, a function, `EXECUTE IMMEDIATE`
//!   or `BEGIN NOT ATOMIC`), session variables set as `SET x`, `SET SESSION x`,
//!   `SET @@session.x`, `SET NAMES`, `SET autocommit`, `SET ROLE`, temporary tables
//!   and sequences, SQL `PREPARE` and `USE`. It does not set it for protocol-level
//!   prepares (COM_STMT_PREPARE: our statement cache) nor for `START TRANSACTION ..
//!   COMMIT`, which is what lets a clean connection keep its cache. Nor, though they
//!   change the session, for `SELECT @a := ..`, `SELECT .. INTO @a`, `SET @@x = ..`,
//!   `GET_LOCK`, `LOCK TABLES`, `HANDLER .. OPEN` and one-shot `SET TRANSACTION`:
//!   rule 5 below covers those.
//! - `SERVER_STATUS_IN_TRANS`: a transaction is open.
//! - `SERVER_STATUS_AUTOCOMMIT`: off means the next statement opens a transaction.
//!
//! `tests/session_reset.rs` checks each of these against the real server.
//!
//! ## The rule
//! A connection is reset before it is handed out again when, since its last reset,
//! any of these held (the first that applies is its [`ResetReason`]):
//! 1. the server does not track session state (no `CLIENT_SESSION_TRACK`, or the
//!    `SET` failed): every give-back resets, as in the `mysql` crate;
//! 2. an OK packet carried `SERVER_SESSION_STATE_CHANGED`;
//! 3. the last OK packet said a transaction is open, or autocommit is off;
//! 4. a statement failed (ERR packets carry no status: what a failed statement did
//!    before it failed, or whether a killed one left anything, is not reported);
//! 5. a statement's text names state the tracker does not report (see
//!    `names_untracked_state`): any `@` (variables), named locks (`GET_LOCK`),
//!    `LOCK TABLES`, `HANDLER`, `XA`, one-shot `SET TRANSACTION`, `CALL` (a
//!    procedure can do any of these) and `EXECUTE` (`EXECUTE IMMEDIATE` of a text
//!    built at run time, or a SQL prepared statement: what it runs is not in the
//!    statement's text);
//! 6. the application said so ([`crate::PooledConn::mark_session_dirty`]), for what
//!    no rule here can see: a stored function or trigger called by a plain statement
//!    (`SELECT grab()`) that takes a named lock or assigns a variable without `SET @a`.
//!    Its name is no keyword, so it is not covered otherwise; `tests/session_reset.rs`
//!    shows both sides (missed without the mark, clean with it).
//!
//! The reset is COM_RESET_CONNECTION (rolls back, drops temporary tables, clears
//! user and session variables, SQL prepared statements, named locks, table locks and
//! HANDLERs, and our protocol-level prepared statements: the statement cache is
//! cleared with it), then COM_INIT_DB for the configured database and the `SET` that
//! turns tracking on again, all three written at once and answered in one round
//! trip. A reset that fails closes the connection.
//!
//! Left as they are by design: a statement's by-products that are no setting
//! (`LAST_INSERT_ID()`, `ROW_COUNT()`, `FOUND_ROWS()`, the last warnings) and the
//! session's status counters.

/// Why a connection's session must be reset before the pool hands it out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetReason {
    /// The server does not report session changes: every give-back resets.
    NotTracked,
    /// The server reported a session change (a variable, a temporary table, a SQL
    /// `PREPARE`, `USE`).
    StateChanged,
    /// A transaction is open.
    InTransaction,
    /// `autocommit` is off, so the next statement would open a transaction.
    AutocommitOff,
    /// A statement failed; its partial effects are not reported.
    StatementFailed,
    /// A statement names state the server does not report (a named lock,
    /// `LOCK TABLES`, `HANDLER`, `XA`, `SET TRANSACTION`, `CALL`, `EXECUTE`).
    Untracked,
    /// The application asked for it ([`crate::PooledConn::mark_session_dirty`]).
    Marked,
}

/// What we know about a connection's session since its last reset.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionState {
    /// The server reports session changes (see the module comment).
    pub(crate) tracked: bool,
    changed: bool,
    in_trans: bool,
    autocommit_off: bool,
    failed: bool,
    untracked: bool,
    marked: bool,
}

impl SessionState {
    /// The state right after a connect or a reset (with tracking on or not).
    pub(crate) fn fresh(tracked: bool) -> SessionState {
        SessionState {
            tracked,
            ..SessionState::default()
        }
    }

    /// An OK packet (or a result set's terminating OK) with these status flags.
    pub(crate) fn saw_ok(&mut self, flags: mysql_common::constants::StatusFlags) {
        use mysql_common::constants::StatusFlags as F;
        self.changed |= flags.contains(F::SERVER_SESSION_STATE_CHANGED);
        self.in_trans = flags.contains(F::SERVER_STATUS_IN_TRANS);
        self.autocommit_off = !flags.contains(F::SERVER_STATUS_AUTOCOMMIT);
    }

    /// A statement answered with an ERR packet.
    pub(crate) fn saw_error(&mut self) {
        self.failed = true;
    }

    /// A statement is about to be sent (COM_QUERY text or a prepared statement's SQL).
    pub(crate) fn saw_statement(&mut self, sql: &str) {
        if !self.untracked && names_untracked_state(sql) {
            self.untracked = true;
        }
    }

    /// A prepared statement is about to run whose text [`names_untracked_state`]
    /// (worked out once, when it was prepared).
    pub(crate) fn saw_untracked(&mut self, names_untracked: bool) {
        self.untracked |= names_untracked;
    }

    /// Whether a statement now runs inside a transaction: one is open, or autocommit
    /// is off so the next statement opens one (as the last OK packet said).
    pub(crate) fn in_transaction(&self) -> bool {
        self.in_trans || self.autocommit_off
    }

    /// The application knows of a change no rule sees.
    pub(crate) fn mark(&mut self) {
        self.marked = true;
    }

    /// Why a reset is needed, if it is (the module comment's rule, in its order).
    pub(crate) fn reset_reason(&self) -> Option<ResetReason> {
        if !self.tracked {
            Some(ResetReason::NotTracked)
        } else if self.changed {
            Some(ResetReason::StateChanged)
        } else if self.in_trans {
            Some(ResetReason::InTransaction)
        } else if self.autocommit_off {
            Some(ResetReason::AutocommitOff)
        } else if self.failed {
            Some(ResetReason::StatementFailed)
        } else if self.untracked {
            Some(ResetReason::Untracked)
        } else if self.marked {
            Some(ResetReason::Marked)
        } else {
            None
        }
    }
}

/// Words whose statements can leave session state that MariaDB's state-change
/// tracker does not report (checked in `tests/session_reset.rs`): `LOCK` covers
/// `GET_LOCK`, `LOCK TABLES` and `LOCK TABLE`; `HANDLER` an open table handler;
/// `XA` an XA transaction; `CALL` a stored procedure, which can do any of these;
/// `EXECUTE` a statement whose text is built at run time (`EXECUTE IMMEDIATE
/// CONCAT('SELECT GET_L', 'OCK(..)')`, or a SQL `PREPARE`d one), which no rule here
/// can read.
const UNTRACKED_WORDS: &[&str] = &["LOCK", "HANDLER", "XA", "CALL", "EXECUTE"];

/// Word pairs with the same meaning: the one-shot `SET TRANSACTION` (isolation level
/// or access mode of the next transaction only; `START TRANSACTION` does not match,
/// and the transaction it opens is reported by the status flags anyway).
const UNTRACKED_PAIRS: &[(&str, &str)] = &[("SET", "TRANSACTION")];

/// True when `sql` contains an `@` or one of [`UNTRACKED_WORDS`] or
/// [`UNTRACKED_PAIRS`] as words, in any case, inside string literals and comments too
/// (an over-match costs one reset, a miss a leak). Words are split at anything but
/// letters, digits, `$` and non-ASCII: `GET_LOCK` and `is_free_lock` contain the word
/// `LOCK`, `blocks` and `CALLER` do not.
///
/// `@`: MariaDB 10.11 reports a user variable set by `SET @a = ..`, but not one set
/// by `SELECT @a := ..` or `SELECT .. INTO @a`, and it reports `SET SESSION x = ..`,
/// `SET x = ..` and `SET @@session.x = ..` but not `SET @@x = ..`. Every statement
/// that names a variable is therefore counted as a change (reading one too).
pub(crate) fn names_untracked_state(sql: &str) -> bool {
    let bytes = sql.as_bytes();
    if bytes.contains(&b'@') {
        return true;
    }
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'$' || b >= 0x80;
    let mut previous: &[u8] = &[];
    let mut i = 0;
    while i < bytes.len() {
        if !is_word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word(bytes[i]) {
            i += 1;
        }
        let word = &bytes[start..i];
        let is = |w: &str| word.eq_ignore_ascii_case(w.as_bytes());
        if UNTRACKED_WORDS.iter().any(|w| is(w))
            || UNTRACKED_PAIRS.iter().any(|(first, second)| {
                previous.eq_ignore_ascii_case(first.as_bytes()) && is(second)
            })
        {
            return true;
        }
        previous = word;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untracked_words_are_found_as_words_in_any_case() {
        for sql in [
            "SELECT GET_LOCK('a', 0)",
            "select get_lock('a', 0)",
            "do release_lock('a')",
            "LOCK TABLES t READ",
            "lock table t write",
            "HANDLER t OPEN",
            "xa start 'x'",
            "SET TRANSACTION READ ONLY",
            "set  transaction isolation level serializable",
            "call p()",
            "EXECUTE IMMEDIATE CONCAT('SELECT GET_L', 'OCK(1, 0)')",
            "execute s",
            "SELECT 1 /* LOCK */",
            "SELECT `is_free_lock`('a')",
            "SELECT @a := 1",
            "SELECT 1 INTO @b",
            "SET @@max_statement_time = 5",
        ] {
            assert!(names_untracked_state(sql), "{sql}");
        }
        for sql in [
            "SELECT 1",
            "SELECT * FROM blocks WHERE caller = 'x'",
            "SELECT xaxis, locked FROM t",
            "INSERT INTO t (v) VALUES (?)",
            "START TRANSACTION",
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "",
        ] {
            assert!(!names_untracked_state(sql), "{sql}");
        }
    }
}
