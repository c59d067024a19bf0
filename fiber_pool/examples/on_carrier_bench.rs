//! Figures for `on_carrier` (STACK_SIZES.md, fiber_pool's README): the cost of one
//! round trip from a fiber to its carrier's stack and back, and how much of the
//! carrier's may stack each kind of may call uses there, against the fiber stack the
//! same calls used when they ran on the fiber.
//!
//! Run with: `cargo run --release -p fiber_pool --example on_carrier_bench`
//!
//! The carrier's use is measured where the call runs: inside `on_carrier`, the stack
//! below the current frame is painted with a pattern, the may call is made, and the
//! lowest word changed gives its depth.

/// Required by `FiberPool::new`: overflows never strike inside malloc.
#[global_allocator]
static ALLOC: fiber_pool::FiberSafeAlloc = fiber_pool::FiberSafeAlloc;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use fiber_pool::{on_carrier, spawn, FiberPool, PoolConfig};

/// Round trips timed per run.
const CALLS: u32 = 1_000_000;
/// Carrier stacks here: room for the painted region below the call.
const CARRIER_STACK: usize = 64 * 1024;
/// How far below the painting frame the pattern goes.
const PAINT: usize = 24 * 1024;
/// Left unpainted just below the painting frame (its own frame and red zone).
const SKIP: usize = 64;
const PATTERN: u64 = 0x5afe_5afe_5afe_5afe;

/// A labelled job, given the echo server's address.
type Job = (&'static str, fn(SocketAddr));

fn main() {
    let pool = FiberPool::new(PoolConfig {
        size: 1,
        stack_size: 64 * 1024,
        measure_every: 1,
        ..PoolConfig::default()
    })
    .unwrap();

    // The cost of the switch: a trivial call on the carrier, against the same call
    // made directly. Median of 5 runs.
    let p = pool.clone();
    let carrier = move || {
        let mut on = Vec::new();
        let mut direct = Vec::new();
        for _ in 0..5 {
            on.push(
                p.run("switch", time(|| on_carrier(|| std::hint::black_box(1))))
                    .unwrap(),
            );
            direct.push(p.run("direct", time(|| std::hint::black_box(1))).unwrap());
        }
        (median(on), median(direct))
    };
    let (on, direct) = spawn::spawn("switch", None, carrier)
        .unwrap()
        .join()
        .unwrap();
    println!("on_carrier round trip: {on:.1} ns per call (a direct call: {direct:.1} ns)");

    // Carrier stack per kind of may call, measured on the carrier (see above), and the
    // fiber stack the same jobs use.
    let echo = echo_server();
    let jobs: [Job; 4] = [
        ("empty", |_| {}),
        ("sleep", |_| {
            let used =
                on_carrier(|| carrier_use(|| may::coroutine::sleep(Duration::from_millis(1))));
            println!("sleep: carrier stack used {used} bytes");
            fiber_pool::sleep(Duration::from_millis(1));
        }),
        ("socket", |addr| {
            let mut s = on_carrier(|| {
                let mut s = None;
                let used = carrier_use(|| {
                    s = Some(fiber_pool::net::connect(&addr, Duration::from_secs(2)).unwrap())
                });
                println!("connect: carrier stack used {used} bytes");
                let mut s = s.unwrap();
                let used = carrier_use(|| s.write_all(b"hello").unwrap());
                println!("write: carrier stack used {used} bytes");
                let mut buf = [0u8; 5];
                let used = carrier_use(|| s.read_exact(&mut buf).unwrap());
                println!("read: carrier stack used {used} bytes");
                let used = carrier_use(|| drop(s));
                println!("drop: carrier stack used {used} bytes");
                fiber_pool::net::connect(&addr, Duration::from_secs(2)).unwrap()
            });
            s.write_all(b"hello").unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).unwrap();
        }),
        ("may_on_fiber", |_| {
            may::coroutine::sleep(Duration::from_millis(1));
        }),
    ];
    for (label, job) in jobs {
        let p = pool.clone();
        let carrier = move || {
            p.run(label, move || job(echo)).unwrap();
        };
        spawn::spawn(label, Some(CARRIER_STACK), carrier)
            .unwrap()
            .join()
            .unwrap();
    }
    let stats = pool.stats();
    for (label, _) in jobs {
        println!(
            "{label}: fiber stack used {} bytes",
            stats.per_label[label].peak_stack_bytes
        );
    }
}

/// Bytes of stack `f` uses below the caller's frame (at most `PAINT`).
#[inline(never)]
fn carrier_use(f: impl FnOnce()) -> usize {
    let here = paint();
    f();
    let bottom = here - PAINT;
    let mut addr = bottom;
    // SAFETY: the same words `paint` wrote, below this frame and within the carrier's
    // stack (CARRIER_STACK leaves room); `f`'s frames are gone again, so nothing else
    // uses them now. Read as volatile so that the scan is not optimised away.
    while addr < here - SKIP && unsafe { std::ptr::read_volatile(addr as *const u64) } == PATTERN {
        addr += 8;
    }
    here - addr
}

/// Fills `[sp - PAINT, sp - SKIP)` with `PATTERN`; returns the stack pointer's
/// address (approximately: a local's).
#[inline(never)]
fn paint() -> usize {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize & !7;
    let mut addr = here - PAINT;
    while addr < here - SKIP {
        // SAFETY: unused stack below our own frame and red zone, within the carrier's
        // CARRIER_STACK bytes (the carriers here are shallow); it is scratch until a
        // call grows the stack over it, which is what we measure.
        unsafe { std::ptr::write_volatile(addr as *mut u64, PATTERN) };
        addr += 8;
    }
    here
}

/// Nanoseconds per call of `f`, over `CALLS` calls.
fn time(f: impl Fn() -> i32 + Send) -> impl FnOnce() -> f64 + Send {
    move || {
        let start = Instant::now();
        for _ in 0..CALLS {
            std::hint::black_box(f());
        }
        start.elapsed().as_nanos() as f64 / f64::from(CALLS)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A loopback echo server on a plain thread, for the socket job.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 5];
            if s.read_exact(&mut buf).is_ok() {
                // Late, so that the read must wait in may.
                std::thread::sleep(Duration::from_millis(5));
                let _ = s.write_all(&buf);
            }
        }
    });
    addr
}
