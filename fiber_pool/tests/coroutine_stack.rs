//! The patched generator (`patches/generator`) writes nothing to a may coroutine's
//! stack that it does not use: a stack of an even size (may's default, and every
//! carrier's) keeps its bottom page out of memory, where stock generator 0.8.12 wrote
//! 8 sentinel words there and so made it resident for the coroutine's life, a page a
//! connection. An overflow still ends the process, as it did: the guard page below
//! the stack catches it, and may then sees the stack as used whole.
//!
//! Whether a page is resident is read from `/proc/self/pagemap` (bit 63 of a page's
//! entry: present; readable without privileges, which only hide the frame number).

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::sync::mpsc;
use std::time::Duration;

/// A page on this machine (the tests assume 4 KiB, as generator's stacks do on x86-64).
const PAGE: usize = 4096;

/// Whether the page holding `addr` is in memory.
fn resident(addr: usize) -> bool {
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").expect("procfs is mounted");
    pagemap
        .seek(SeekFrom::Start((addr / PAGE * 8) as u64))
        .unwrap();
    let mut entry = [0u8; 8];
    pagemap.read_exact(&mut entry).unwrap();
    u64::from_le_bytes(entry) >> 63 == 1
}

/// The mapping of this process that holds `addr`: its start and end.
fn mapping_of(addr: usize) -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find_map(|line| {
            let range = line.split_whitespace().next()?;
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (start..end).contains(&addr).then_some((start, end))
        })
        .unwrap_or_else(|| panic!("no mapping holds {addr:#x}:\n{maps}"))
}

#[test]
fn a_waiting_coroutine_keeps_the_bottom_of_its_stack_out_of_memory() {
    // A coroutine of may's default stack size (32 KiB: even, so not tracked) says
    // where a local of its lives and waits; the test looks at its stack meanwhile.
    let (at, where_) = mpsc::channel();
    let (go_on, wait) = may::sync::mpsc::channel::<()>();
    let coroutine = fiber_pool::spawn::go(move || {
        let local = std::hint::black_box([1u8; 64]);
        at.send(local.as_ptr() as usize).unwrap();
        wait.recv().unwrap();
        std::hint::black_box(local);
    });
    let local = where_
        .recv_timeout(Duration::from_secs(10))
        .expect("the coroutine ran");
    // The stack's usable part is a mapping of its own (the guard page below it is
    // another, PROT_NONE): the frames are at its top, its bottom is the bottom page.
    let (bottom, top) = mapping_of(local);
    assert_eq!(
        top - bottom,
        32 * 1024,
        "not a 32 KiB stack: {bottom:#x}-{top:#x}"
    );
    assert!(resident(local), "the page of the coroutine's own local");
    assert!(
        !resident(bottom),
        "the bottom page of a waiting coroutine's stack is resident"
    );
    go_on.send(()).unwrap();
    coroutine.join().unwrap();
}

#[test]
fn a_coroutine_that_overflows_its_stack_still_ends_the_process() {
    const NAME: &str = "a_coroutine_that_overflows_its_stack_still_ends_the_process";
    if common::child_mode(NAME).is_none() {
        let out = common::child_command(NAME, "overflow").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("coroutine has overflowed its stack"),
            "{}: {stderr}",
            out.status
        );
        assert!(
            stderr.contains("stack overflow detected"),
            "{}: {stderr}",
            out.status
        );
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        return;
    }
    // The child: a coroutine reads the guard page under its stack, as a frame that
    // steps over the stack's bottom word does (a debug build's can: stock generator
    // looked at that word only, and the process lived on). may exits while it drops
    // the coroutine, which is after the join has returned: the child waits for it.
    let _ = fiber_pool::spawn::go(|| {
        let local = std::hint::black_box(0u8);
        let (bottom, _) = mapping_of(&local as *const u8 as usize);
        // SAFETY: none; the fault is the test. `bottom - 8` is in the guard page.
        unsafe { std::ptr::read_volatile((bottom - 8) as *const u64) }
    })
    .join();
    std::thread::sleep(Duration::from_secs(30));
    println!("child: the overflow let the process go on");
}
