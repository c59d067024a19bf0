//! Stack high-water marks without committing every page.
//!
//! Before a measured job, `reset` drops the usable part of the stack with
//! `madvise(MADV_DONTNEED)`: its pages are returned to the kernel and read as
//! zero when touched again. After the job, `measure` asks `mincore` which
//! pages are resident, takes the lowest one, and scans it upwards for the
//! first non-zero word. Everything above that word was (or may have been)
//! used; the result is precise to 8 bytes, up to a frame that stored only
//! zeros at its very bottom. Only pages the job touched are ever committed,
//! and measuring also gives idle stacks' memory back.
//!
//! Cost per measured job: two system calls, a scan of at most one page, and a
//! page fault for each page the job touches again (see the `pool_bench` example).

use crate::stack::{page_size, FiberStack};

/// Pages queried per `mincore` call (a fixed buffer on the carrier's stack).
const MINCORE_CHUNK: usize = 64;

/// Forgets the contents of the stack's usable part.
pub(crate) fn reset(stack: &FiberStack) {
    // SAFETY: the range is the usable part of a stack we own exclusively and
    // on which no fiber runs; MADV_DONTNEED on private anonymous memory only
    // zeroes it.
    unsafe {
        libc::madvise(
            stack.guard_end() as *mut libc::c_void,
            stack.usable(),
            libc::MADV_DONTNEED,
        );
    }
}

/// Bytes of the stack used since the last `reset`, counted from the top.
pub(crate) fn measure(stack: &FiberStack) -> usize {
    let page = page_size();
    let pages = stack.usable() / page;
    let mut first = 0;
    let mut vec = [0u8; MINCORE_CHUNK];
    while first < pages {
        let n = (pages - first).min(MINCORE_CHUNK);
        let start = stack.guard_end() + first * page;
        // SAFETY: `start..start + n pages` lies in the stack's mapping, and
        // `vec` has room for `n` entries.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, n * page, vec.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        if let Some(i) = vec[..n].iter().position(|v| v & 1 != 0) {
            let page_start = start + i * page;
            return stack.top() - lowest_nonzero(page_start, page, stack.top());
        }
        first += n;
    }
    0
}

/// Address of the first non-zero word in the resident page at `page_start`
/// (or the page's end if it is all zero).
fn lowest_nonzero(page_start: usize, page: usize, top: usize) -> usize {
    let words = page / std::mem::size_of::<u64>();
    for w in 0..words {
        let addr = page_start + w * 8;
        // SAFETY: the page is mapped readable and resident (mincore), aligned,
        // and no fiber runs on the stack now. Volatile: the compiler must not
        // assume anything about memory another context wrote.
        if unsafe { std::ptr::read_volatile(addr as *const u64) } != 0 {
            return addr;
        }
    }
    (page_start + page).min(top)
}
