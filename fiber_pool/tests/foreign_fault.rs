//! A fault that is not a fiber's overflow must kill the process by its signal,
//! and quickly, whatever state it struck in. Here it strikes inside glibc's
//! malloc with the arena lock held (heap corruption found by a walk of the
//! free lists): a handler that allocates, prints or locks from there waits for
//! ever on that lock instead of crashing. Run in a child process (see
//! `common::child_mode`).

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fiber_pool::{FiberPool, PoolConfig};

const NAME: &str = "a_fault_inside_malloc_with_its_lock_held_still_dies_by_sigsegv";
/// Written by the child just before its fault.
const ABOUT_TO_FAULT: &str = "child: corrupting a fastbin and walking it";
/// How long the child may take to die.
const LIMIT: Duration = Duration::from_secs(5);

/// Corrupts the head of a glibc fastbin so that the next walk of the free
/// lists follows it to an unmapped address, then walks them with `mallinfo2`,
/// which holds the arena's lock while it does.
fn fault_inside_malloc() {
    const CHUNKS: usize = 20;
    let mut chunks = [std::ptr::null_mut::<libc::c_void>(); CHUNKS];
    eprintln!("{ABOUT_TO_FAULT}");
    // SAFETY: none: this corrupts the heap on purpose, in a child process that
    // is meant to die of it. malloc(24) chunks go to the thread cache until it
    // holds 7, then to a fastbin; the last one freed heads that fastbin. Its
    // first word is the fastbin link, stored safe-linked (glibc 2.32 and
    // later: the next chunk's address XOR the link's own address >> 12); it is
    // made to point at 0x1000, aligned (so glibc's alignment check passes) and
    // never mapped.
    unsafe {
        for c in &mut chunks {
            *c = libc::malloc(24);
        }
        for &c in &chunks {
            libc::free(c);
        }
        let link = chunks[CHUNKS - 1].cast::<usize>();
        link.write_volatile(0x1000 ^ (link as usize >> 12));
        libc::mallinfo2();
    }
    eprintln!("child: the walk did not fault");
}

#[test]
fn a_fault_inside_malloc_with_its_lock_held_still_dies_by_sigsegv() {
    if common::child_mode(NAME).is_some() {
        // The pool's handler is installed, in front of may's (generator's).
        let pool = FiberPool::new(PoolConfig {
            size: 1,
            ..PoolConfig::default()
        })
        .unwrap();
        let p = pool.clone();
        may::go!(move || p.run("ok", || ()).unwrap())
            .join()
            .unwrap();
        return fault_inside_malloc();
    }
    let mut child = common::child_command(NAME, "fault")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the child hung for {LIMIT:?} after its fault instead of dying");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains(ABOUT_TO_FAULT), "{status}: {stderr}");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status}: {stderr}");
    // The pool's own line, in place of may's handler's backtrace: the fault is
    // in the chunk at 0x1000 (which of its words glibc reads first differs
    // between builds).
    assert!(
        stderr.contains("fiber_pool: SIGSEGV at address 0x000000000000100"),
        "{stderr}"
    );
}
