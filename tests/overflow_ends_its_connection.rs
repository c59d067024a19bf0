//! A MySQL connection held by a fiber that overflows is ended on the server and its
//! pool slot freed, and the process keeps only the two fds the abandoned checkout
//! leaked. A binary of its own: it counts the process's open fds, which any test
//! beside it would change.

mod common;
mod overflows;

use common::{get, serve};
use overflows::{open_fds, server_side_connections};

#[test]
fn a_connection_held_by_an_overflowing_fiber_is_ended_on_the_server_and_its_slot_freed() {
    use fiber_pool::{FiberPool, PoolConfig, RunError};
    // A private server: the count of its connections is ours alone.
    let app = serve(|c| {
        c.database_url = None;
        c.db_pool = 2;
        c.db_wait_timeout = std::time::Duration::from_secs(2);
    });
    let mariadb = app.mariadb.as_ref().expect("a private MariaDB");
    let mut admin = fiber_mysql::Conn::connect(&mariadb.admin_opts()).unwrap();
    // The pool's side channel for KILLs is opened ahead, beside the pool of 2: the
    // server has those connections too, and no others.
    let opened_by = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.state.db.stats().kill_connections < fiber_mysql::KILL_CONNECTIONS {
        assert!(
            std::time::Instant::now() < opened_by,
            "the side channel never opened"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let most = 2 + fiber_mysql::KILL_CONNECTIONS;
    let fibers = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 32 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let before = open_fds();
    for i in 0..30 {
        let db = app.state.db.clone();
        let fibers = fibers.clone();
        let holds_db = move || {
            fibers.run("holds_db", move || {
                let mut conn = db
                    .checkout()
                    .unwrap_or_else(|e| panic!("checkout {i}: {e}"));
                conn.query("select 1")
                    .unwrap_or_else(|e| panic!("query {i}: {e}"));
                // Deeper than 32 KiB while the checkout is held.
                fiberstack::app::deep::level(400, 1024)
            })
        };
        let outcome = fiber_pool::carrier::go(holds_db).join().unwrap();
        assert!(
            matches!(outcome, Err(RunError::StackOverflow { .. })),
            "{outcome:?}"
        );
        let open = server_side_connections(&mut admin, most);
        assert!(
            open <= most,
            "iteration {i}: the server still has {open} connections of a pool of 2 and \
             its side channel"
        );
    }
    let s = app.state.db.stats();
    assert_eq!((s.in_use, s.abandoned), (0, 30), "{s:?}");
    // Our end of each abandoned socket stays open, leaked with its checkout (the
    // checkout may be mid-command, or in use by a thread the job started: see
    // fiber_mysql's pool.rs, "Abandoned checkouts"): its two fds per overflow, no
    // more. The server's end is what the pool's shutdown ended (above), so the pool
    // of 2 was never exhausted.
    assert!(
        open_fds() <= before + 2 * 30 + 2,
        "fds {before} -> {}",
        open_fds()
    );
    assert_eq!(get(app.addr(), "/widgets?sleep=0").status, 200);
}
