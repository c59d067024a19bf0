//! Turning a fiber's stack overflow into a value: the SIGSEGV/SIGBUS handler,
//! its chaining to the previous handler, and per-thread alternate signal
//! stacks.
//!
//! When a job touches its guard the kernel delivers SIGSEGV on the
//! thread's alternate signal stack (the fiber stack itself is exhausted). The
//! handler looks the stack pointer up in the [registry](crate::registry); if it
//! is a running fiber and the fault is on its guard, corosensei's
//! `CoroutineTrapHandler` rewrites the interrupted registers so that, when the
//! handler returns, the fiber's stack is reset and it returns
//! `Outcome::Overflow` to the carrier's `resume`, with the address of the
//! instruction that faulted (read from the interrupted context, so that tests
//! can resolve it to the function it was in). The abandoned frames are
//! not unwound. Every other fault goes to the handler that was installed
//! before ours, except may's own (generator's), which is not async-signal-safe
//! and is skipped when we saw it installed (see `install`): then one line of
//! ours says what faulted, and the fault goes where generator would pass it
//! (std's handler, or the default action, which kills the process with the
//! signal). Real crashes still crash, and promptly.
//!
//! A SIGSEGV or SIGBUS that no instruction raised, one *sent* (`kill`, `tgkill`,
//! `sigqueue`: `si_code` is `SI_USER`, `SI_TKILL` or another value <= 0), is no fault:
//! it is never taken for an overflow, whatever stack the thread it lands on is
//! running, and it is not passed on either. Passed on, it would reach the default
//! action or std's handler, and both expect the faulting instruction to run again and
//! fault once more, with the default action restored (std's handler restores it
//! itself): no instruction faults, so the process would go on without our handler,
//! and its next overflow, instead of failing one request, would kill it. So such a
//! signal is said on stderr, in one line naming its sender's pid and uid, and
//! otherwise ignored: the server lives, and every later overflow is caught as before
//! (test `sent_fault`). For a core dump of a running server, send `SIGQUIT` or
//! `SIGABRT`, whose default action dumps one.
//!
//! The handler only does async-signal-safe work: atomic loads over the
//! registry, a write of a few words onto the faulting fiber's own stack, a
//! `write(2)` of a line from its own stack, and `sigaction` or a call of the
//! previous handler.

use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

use crate::outcome::Outcome;
use crate::registry::StackEntry;

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("fiber_pool's trap handler supports Linux on x86_64 only");

/// Size of the alternate signal stack given to each thread that runs fibers (a
/// limit of [`config`](crate::config), where [`ConfigError`](crate::ConfigError) names it too).
pub use crate::config::ALT_STACK_SIZE;

/// The handlers we replaced, one per signal; written once before ours is
/// installed, read-only afterwards.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written only inside `INSTALL.call_once`, before our handler (the
// only reader) is installed; read-only from then on.
unsafe impl Sync for Previous {}

static PREV_SEGV: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));
static PREV_BUS: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));
static INSTALL: Once = Once::new();
/// errno of a failed installation, 0 when it succeeded.
static INSTALL_ERRNO: AtomicI32 = AtomicI32::new(0);
/// may's own handler (generator's) was seen being installed and is skipped:
/// the previous handlers are the ones it would itself have passed faults to.
static SKIPS_MAYS: AtomicBool = AtomicBool::new(false);

/// Installs the handler for SIGSEGV and SIGBUS once per process, around
/// `start_may`, which makes may create its first coroutine (generator installs
/// its own handler then; ours goes in front of it).
///
/// When generator's handler appears during `start_may`, it is not chained to:
/// for a fault outside its guard pages it captures a backtrace, prints it and
/// takes a mutex, inside the signal handler, and a fault that struck with
/// malloc's or stdout's lock held (heap corruption found inside malloc) then
/// waits for that lock for ever instead of crashing (test `foreign_fault`).
/// Faults that are not ours go to the handler that was there before it (std's,
/// which reports a main-thread overflow, or the default action), which is
/// where generator passes them itself, after one line of our own
/// ([`report_fatal`]). When may was started before the first pool, its
/// handler cannot be told apart from any other and is chained to as it is.
pub(crate) fn install(start_may: impl FnOnce()) -> io::Result<()> {
    INSTALL.call_once(|| {
        let fail = || {
            let err = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            INSTALL_ERRNO.store(err, Ordering::Relaxed);
        };
        let signals = [(libc::SIGSEGV, &PREV_SEGV), (libc::SIGBUS, &PREV_BUS)];
        let mut before = [MaybeUninit::<libc::sigaction>::uninit(); 2];
        for ((sig, _), before) in signals.iter().zip(&mut before) {
            // SAFETY: queries the current action into a local.
            if unsafe { libc::sigaction(*sig, ptr::null(), before.as_mut_ptr()) } != 0 {
                return fail();
            }
        }
        start_may();
        for ((sig, prev), before) in signals.into_iter().zip(before) {
            // SAFETY: `prev` is written before the handler that reads it is
            // installed; `before` was filled by sigaction above; the new action
            // is fully initialised (zeroed is a valid `sigaction`, then the
            // fields we need).
            unsafe {
                let prev = &mut *prev.0.get();
                if libc::sigaction(sig, ptr::null(), prev.as_mut_ptr()) != 0 {
                    return fail();
                }
                let before = before.assume_init();
                if prev.assume_init_ref().sa_sigaction != before.sa_sigaction {
                    // Installed by may's first coroutine: generator's.
                    prev.write(before);
                    SKIPS_MAYS.store(true, Ordering::Relaxed);
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handler as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig, &action, ptr::null_mut()) != 0 {
                    return fail();
                }
            }
        }
    });
    match INSTALL_ERRNO.load(Ordering::Relaxed) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// The signal handler. See the module documentation.
///
/// # Safety
///
/// Called by the kernel only, with a valid `siginfo_t` and `ucontext_t`.
unsafe extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to SA_SIGINFO handlers; for a
    // sent signal (`si_code` <= 0) its union holds the sender's pid and uid.
    let sent = unsafe {
        ((*info).si_code <= 0).then(|| ((*info).si_pid(), (*info).si_uid(), (*info).si_code))
    };
    if let Some((pid, uid, code)) = sent {
        // Not a fault: see the module documentation.
        return report_sent(sig, pid, uid, code);
    }
    let uc = ctx.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes valid pointers to SA_SIGINFO handlers.
    let (fault, sp, fault_pc) = unsafe {
        let gregs = &(*uc).uc_mcontext.gregs;
        (
            (*info).si_addr() as usize,
            gregs[libc::REG_RSP as usize] as usize,
            gregs[libc::REG_RIP as usize] as usize,
        )
    };
    if let Some(entry) = StackEntry::find_running_in_handler(sp) {
        if entry.is_overflow(fault, sp) {
            // SAFETY: we are the thread executing the fiber on `entry`'s
            // stack (its stack pointer is in it).
            if let Some(trap) = unsafe { entry.trap() } {
                if trap.stack_ptr_in_bounds(sp) {
                    // SAFETY: the stack pointer is inside the trapping
                    // coroutine (checked above) and we write every register
                    // the returned `TrapHandlerRegs` names into the
                    // interrupted context. The jobs' writes to memory outside
                    // the fiber are the documented caveat of this crate.
                    unsafe {
                        let regs = trap.setup_trap_handler(move || Outcome::Overflow { fault_pc });
                        let gregs = &mut (*uc).uc_mcontext.gregs;
                        gregs[libc::REG_RIP as usize] = regs.rip as i64;
                        gregs[libc::REG_RSP as usize] = regs.rsp as i64;
                        gregs[libc::REG_RBP as usize] = regs.rbp as i64;
                        gregs[libc::REG_RDI as usize] = regs.rdi as i64;
                        gregs[libc::REG_RSI as usize] = regs.rsi as i64;
                    }
                    return;
                }
            }
        }
    }
    if SKIPS_MAYS.load(Ordering::Relaxed) {
        report_fatal(sig, fault, sp, fault_pc);
    }
    // SAFETY: forwarding the kernel's own arguments.
    unsafe { chain(sig, info, ctx) }
}

/// Writes one line about a fault that is not a fiber's overflow to stderr, in place
/// of the report of may's handler, which is skipped.
fn report_fatal(sig: libc::c_int, fault: usize, sp: usize, pc: usize) {
    let mut line = Line::new();
    line.put(b"\n").put_signal(sig);
    for (what, value) in [
        (&b" at address "[..], fault),
        (b", instruction ", pc),
        (b", stack pointer ", sp),
    ] {
        line.put(what).put_hex(value);
    }
    line.put(b": not a fiber's stack overflow (near the stack pointer: a may coroutine's or a thread's)\n");
    line.write();
}

/// Writes one line about a SIGSEGV or SIGBUS sent by `pid` (as `uid`), which is
/// ignored (see the module documentation), to stderr.
fn report_sent(sig: libc::c_int, pid: libc::pid_t, uid: libc::uid_t, code: libc::c_int) {
    let mut line = Line::new();
    line.put(b"\n").put_signal(sig).put(b" sent by pid ");
    line.put_decimal(i64::from(pid)).put(b" (uid ");
    line.put_decimal(i64::from(uid)).put(b", si_code ");
    line.put_decimal(i64::from(code))
        .put(b"), not raised by a fault: ignored (for a core dump send SIGQUIT or SIGABRT)\n");
    line.write();
}

/// A line of text built on the handler's own stack and written to stderr with one
/// `write(2)`: async-signal-safe (no allocation, no lock). Cut at 256 bytes.
struct Line {
    bytes: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            bytes: [0; 256],
            len: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> &mut Line {
        let n = bytes.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        self
    }

    /// `fiber_pool: SIGSEGV` or `fiber_pool: SIGBUS`.
    fn put_signal(&mut self, sig: libc::c_int) -> &mut Line {
        self.put(if sig == libc::SIGBUS {
            b"fiber_pool: SIGBUS"
        } else {
            b"fiber_pool: SIGSEGV"
        })
    }

    /// `value` as `0x` and 16 hexadecimal digits.
    fn put_hex(&mut self, value: usize) -> &mut Line {
        let mut out = *b"0x0000000000000000";
        for (i, digit) in out[2..].iter_mut().enumerate() {
            let nibble = (value >> (60 - 4 * i)) & 0xf;
            *digit = b"0123456789abcdef"[nibble];
        }
        self.put(&out)
    }

    /// `value` in decimal.
    fn put_decimal(&mut self, value: i64) -> &mut Line {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut left = value.unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (left % 10) as u8;
            left /= 10;
            if left == 0 {
                break;
            }
        }
        if value < 0 {
            self.put(b"-");
        }
        self.put(&digits[at..])
    }

    fn write(&self) {
        // SAFETY: writes `len` initialised bytes of our buffer to fd 2.
        unsafe { libc::write(libc::STDERR_FILENO, self.bytes.as_ptr().cast(), self.len) };
    }
}

/// Passes a fault that is not ours to the previous handler.
///
/// # Safety
///
/// Only from `handler`, with the kernel's arguments.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    };
    // SAFETY: `prev` was initialised before our handler was installed.
    let prev = unsafe { (*prev.0.get()).assume_init_ref() };
    let action = prev.sa_sigaction;
    if action == libc::SIG_DFL || action == libc::SIG_IGN {
        // Restore the default action and return: the faulting instruction
        // runs again and the kernel kills the process with `sig`.
        // SAFETY: sigaction is async-signal-safe; a zeroed action with
        // SIG_DFL is valid.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, ptr::null_mut());
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the previous handler has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute::<libc::sighandler_t, _>(action) };
        f(sig, info, ctx);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes the signal
        // number only.
        let f: extern "C" fn(libc::c_int) =
            unsafe { std::mem::transmute::<libc::sighandler_t, _>(action) };
        f(sig);
    }
}

/// This thread's alternate signal stack, owned: unmapped when the thread ends.
struct AltStack {
    map: *mut libc::c_void,
    len: usize,
}

impl AltStack {
    /// Gives the current thread an alternate signal stack of at least
    /// [`ALT_STACK_SIZE`] bytes, unless it has one already. `None` when the
    /// existing one is big enough.
    fn install() -> io::Result<Option<AltStack>> {
        // SAFETY: querying the current alternate stack into a local.
        let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: `old` is a valid out-pointer.
        if unsafe { libc::sigaltstack(ptr::null(), &mut old) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if old.ss_flags & libc::SS_DISABLE == 0 && old.ss_size >= ALT_STACK_SIZE {
            return Ok(None);
        }
        let page = crate::stack::page_size();
        let len = ALT_STACK_SIZE + page;
        // SAFETY: a fresh anonymous private mapping; checked below.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let alt = AltStack { map, len };
        // SAFETY: the lowest page becomes a guard page of our own mapping,
        // and the rest is handed to the kernel as this thread's signal stack;
        // `alt` keeps the mapping alive until the thread ends.
        unsafe {
            if libc::mprotect(map, page, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            let new = libc::stack_t {
                ss_sp: map.cast::<u8>().add(page).cast(),
                ss_flags: 0,
                ss_size: ALT_STACK_SIZE,
            };
            if libc::sigaltstack(&new, ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Some(alt))
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: disable the alternate stack if it is still ours (the thread
        // is ending and not running a handler), then unmap our mapping.
        unsafe {
            let mut cur: libc::stack_t = std::mem::zeroed();
            if libc::sigaltstack(ptr::null(), &mut cur) == 0
                && cur.ss_sp as usize >= self.map as usize
                && (cur.ss_sp as usize) < self.map as usize + self.len
            {
                let off = libc::stack_t {
                    ss_sp: ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&off, ptr::null_mut());
            }
            libc::munmap(self.map, self.len);
        }
    }
}

/// The signals that stay unblocked while a fiber runs (on may's threads: always):
/// the synchronous ones, which the kernel raises on the thread whose own instruction
/// caused them, with `force_sig`: blocked, such a signal is not held back but the
/// process is killed without any handler running.
///
/// - `SIGSEGV`, `SIGBUS`: a stack overflow into a guard page, which our handler
///   ([`install`]) turns into `RunError::StackOverflow`, and real crashes, which it
///   passes on;
/// - `SIGILL` (`ud2`: a Rust `abort` in some builds, an unsupported instruction),
///   `SIGFPE` (an integer division by zero in C code), `SIGTRAP` (a breakpoint, a
///   debugger's single step), `SIGSYS` (a seccomp filter's trap): whoever installed a
///   handler for them expects it to run where the fault is.
///
/// They are unblocked explicitly where the mask is set, even on a thread that had them
/// blocked (test `blocked_faults`). Every other signal is blocked, so that none is
/// delivered on a fiber's stack. A handler installed without `SA_ONSTACK` (a
/// profiler's `SIGPROF`, a Ctrl-C crate's `SIGINT`, a library's real-time signal)
/// runs on the interrupted stack; a fiber within a few KiB of its guard page has no
/// room for the kernel's signal frame (up to 3.5 KiB with AVX-512 state), and the
/// kernel then kills the process with `SIGSEGV`.
/// Blocked here, a process-directed signal goes to a thread that does not block it (the
/// main thread, or a signal-handling thread of the application); one sent to a single
/// may thread with `tgkill` stays pending. `SIGABRT` is blocked too: `abort()` unblocks
/// it on its own thread before raising it, and one sent from outside goes elsewhere.
/// `SIGKILL` and `SIGSTOP` cannot be blocked, and act on the whole process anyway.
///
/// glibc keeps two signals of its own unblocked whatever the mask asks
/// (`pthread_sigmask` removes them): `SIGSETXID` (33), which `setuid` and its kin
/// broadcast to every thread, and whose handler glibc installs with `SA_ONSTACK` (it
/// runs on the alternate signal stack every carrier has: harmless); and `SIGCANCEL`
/// (32), which only `pthread_cancel` sends, to the thread it cancels, and whose
/// handler runs on the interrupted stack: never cancel a thread that carries fibers.
/// (Read from glibc 2.36's installed actions here.)
///
/// A thread that calls `run` outside may (a plain thread) blocks them only while its
/// fiber runs, and gets its own mask back when `run` returns: it may be the one meant
/// to receive them.
pub(crate) const LEFT_UNBLOCKED: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Every signal but [`LEFT_UNBLOCKED`].
pub(crate) fn blocked_while_running() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigfillset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sig in LEFT_UNBLOCKED {
            libc::sigdelset(&mut set, sig);
        }
        set
    }
}

/// Blocks [`blocked_while_running`] on the calling thread, and unblocks
/// [`LEFT_UNBLOCKED`], which the thread may have inherited blocked (a thread started
/// by one that blocked SIGSEGV, say: an overflow there would kill the process instead
/// of running our handler); returns the old mask.
pub(crate) fn block_async_signals() -> libc::sigset_t {
    // Every signal but those: what was blocked stays blocked, and they are not.
    let set = blocked_while_running();
    // SAFETY: `set` is initialised and pthread_sigmask writes the old mask into a
    // valid local.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, &mut old);
        old
    }
}

/// [`blocked_while_running`] blocked on a thread that is not a may worker while
/// it runs a fiber, and its own mask back afterwards (such a thread may be the
/// one meant to receive those signals, between its runs).
pub(crate) struct BlockedWhileRunning(libc::sigset_t);

impl BlockedWhileRunning {
    /// Blocks the signals on the calling thread until the value is dropped.
    pub(crate) fn block() -> BlockedWhileRunning {
        BlockedWhileRunning(block_async_signals())
    }
}

impl Drop for BlockedWhileRunning {
    fn drop(&mut self) {
        restore_signal_mask(&self.0);
    }
}

/// `f()` with the signals blocked ([`BlockedWhileRunning`]). Out of line: the saved
/// mask (128 bytes) is in this frame only, not in that of every run of a job, which
/// on a may thread (whose signals stay blocked) is on a connection's stack.
#[inline(never)]
pub(crate) fn masked_while<R>(f: impl FnOnce() -> R) -> R {
    let _masked = BlockedWhileRunning::block();
    f()
}

/// Puts back a mask returned by [`block_async_signals`].
pub(crate) fn restore_signal_mask(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask pthread_sigmask gave us.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, ptr::null_mut()) };
}

thread_local! {
    /// This thread's alternate signal stack (`None`: the one it had was big enough),
    /// or the errno of the failure to make it.
    static ALT_STACK: std::cell::OnceCell<Result<Option<AltStack>, i32>> =
        const { std::cell::OnceCell::new() };
}

/// Readies the current thread to carry fibers, once per thread: an alternate signal
/// stack big enough for an overflow to be caught here, the panic hook's stack
/// ([`crate::panic_hook`]), and, on a may thread, every signal but the synchronous
/// ones blocked and those unblocked ([`LEFT_UNBLOCKED`], [`block_async_signals`]).
/// Called when a job starts on a fiber (in `run`): a carrier never changes thread, so
/// the thread it readied is the one the job runs on whenever it is back from
/// [`on_carrier`](crate::on_carrier). After the first call on a thread it is one
/// thread-local check.
///
/// When the OS refuses the alternate stack (no memory for its mapping), the thread
/// keeps the one it had: std gives each of its threads one of about 8 KiB, where our
/// handler alone fits (test `alt_stack`), but a handler that ours passes a fault to
/// may not, and a thread without any dies of an overflow instead of catching it. So
/// the failure is said on stderr, once per thread (here on a carrier's stack, never a
/// fiber's), and returned: [`FiberPool::new`](crate::FiberPool::new) refuses to
/// create a pool without it ([`ConfigError::AltStack`](crate::ConfigError::AltStack)).
/// A later thread that fails is not retried: the line said so.
pub(crate) fn prepare_thread() -> io::Result<()> {
    ALT_STACK.with(|cell| {
        let made = cell.get_or_init(|| {
            crate::panic_hook::prepare_thread();
            if may::coroutine::is_coroutine() {
                block_async_signals();
            }
            AltStack::install().map_err(|e| {
                eprintln!(
                    "fiber_pool: no {ALT_STACK_SIZE}-byte alternate signal stack for thread \
                     {:?} ({e}): a fiber overflow on it may end the process instead of \
                     being caught",
                    std::thread::current().name().unwrap_or("unnamed"),
                );
                e.raw_os_error().unwrap_or(libc::ENOMEM)
            })
        });
        match made {
            Ok(_) => Ok(()),
            Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
        }
    })
}
