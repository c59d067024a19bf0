//! The overflow handler's footprint on the alternate signal stack is small
//! enough for the 8 KiB std gives every thread, which is what a carrier uses
//! if may migrated it mid-job to a worker that never called `run` itself.
//! Measured by painting an alternate stack of our own, overflowing, and
//! finding the lowest byte the kernel and the handler changed.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

mod common;

use fiber_pool::{FiberPool, PoolConfig, RunError};

const ALT: usize = 64 * 1024;
const PAINT: u8 = 0xCD;

#[test]
fn the_overflow_handler_fits_in_std_alt_stack() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 16 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let used = std::thread::spawn(move || {
        // SAFETY: a fresh private mapping that this thread then uses as its
        // signal stack for the rest of its life (leaked on purpose).
        let base = unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                ALT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            std::ptr::write_bytes(map.cast::<u8>(), PAINT, ALT);
            let st = libc::stack_t {
                ss_sp: map,
                ss_flags: 0,
                ss_size: ALT,
            };
            assert_eq!(libc::sigaltstack(&st, std::ptr::null_mut()), 0);
            map.cast::<u8>()
        };
        // `run` from a plain thread: it keeps our (big enough) alt stack.
        let err = pool.run("overflow", || common::recurse(0)).unwrap_err();
        assert!(matches!(err, RunError::StackOverflow { .. }), "{err}");
        // SAFETY: reading our own mapping, no signal is being handled now.
        let lowest = (0..ALT)
            .find(|&i| unsafe { *base.add(i) } != PAINT)
            .expect("the handler ran on the alt stack");
        ALT - lowest
    })
    .join()
    .unwrap();
    eprintln!("kernel signal frame + handler used {used} bytes of the alternate stack");
    assert!(
        used < 6 * 1024,
        "the handler needs {used} bytes: more than std's 8 KiB alt stack safely gives"
    );
}
