//! Test support (feature `testing`): which function an overflow's faulting
//! instruction was in, the heap in use, allocations counted, the signals the crate
//! blocks, and ways to run code with little stack left.
//!
//! [`RunError::StackOverflow`] carries the
//! address of the instruction that touched the guard page. Tests that overflow
//! fibers on purpose resolve those addresses here to say where overflows strike
//! (in a handler's own code, in `reserve_stack`, never inside may or generator).
//! Resolution is binutils' `addr2line` run on this process's executable, so it
//! needs the binary's symbols (test and debug builds have them; release builds
//! of this workspace keep line tables, `debug = 1`).

use std::alloc::{GlobalAlloc, Layout};
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where one faulting instruction was: the functions it is in, innermost first
/// (more than one when code was inlined into its caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The address as the process saw it.
    pub pc: usize,
    /// Demangled function names, innermost first; `??` when unknown.
    pub functions: Vec<String>,
}

impl Located {
    /// The function the instruction itself belongs to.
    pub fn innermost(&self) -> &str {
        self.functions.first().map_or("??", String::as_str)
    }
}

/// Resolve addresses to their functions: inside this process's executable with
/// `addr2line`; inside a shared library or the vDSO as `library+offset` (for example
/// `libc.so.6+0x9faf4`: C code such as `memcpy` that a job called); `??` when the
/// address is in no mapped file or addr2line does not know it.
pub fn locate(pcs: &[usize]) -> io::Result<Vec<Located>> {
    let exe = std::env::current_exe()?;
    let exe_path = exe.to_string_lossy();
    let maps = Maps::read()?;
    let base = maps
        .base_of(&exe_path)
        .ok_or_else(|| io::Error::other(format!("{} is not in /proc/self/maps", exe.display())))?;
    let mut located: Vec<Located> = pcs
        .iter()
        .map(|&pc| Located {
            pc,
            functions: match maps.file_of(pc) {
                Some((path, _)) if path == exe_path => Vec::new(),
                Some((path, offset)) => vec![format!(
                    "{}+{offset:#x}",
                    Path::new(path)
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                )],
                None => vec!["??".to_string()],
            },
        })
        .collect();
    // Each distinct address once.
    let in_exe: std::collections::BTreeSet<usize> = located
        .iter()
        .filter(|at| at.functions.is_empty())
        .map(|at| at.pc)
        .collect();
    let names = addr2line(&exe, in_exe.iter().map(|&pc| pc - base).collect())?;
    let names: std::collections::BTreeMap<usize, Vec<String>> =
        in_exe.into_iter().zip(names).collect();
    for at in located.iter_mut().filter(|at| at.functions.is_empty()) {
        at.functions = names[&at.pc].clone();
    }
    Ok(located)
}

/// The functions (innermost first) of each address of the executable `exe`.
fn addr2line(exe: &Path, addrs: Vec<usize>) -> io::Result<Vec<Vec<String>>> {
    let mut child = Command::new("addr2line")
        .args(["-a", "-f", "-C", "-i", "-e"])
        .arg(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("addr2line (binutils): {e}")))?;
    let asked = addrs.len();
    // Written from a thread of its own while we read: addr2line answers as it reads,
    // and a full pipe each way would otherwise stop both.
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || -> io::Result<()> {
        for addr in addrs {
            writeln!(stdin, "{addr:#x}")?;
        }
        Ok(())
    });
    let out = child.wait_with_output()?;
    writer.join().expect("the writer thread")?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "addr2line failed: {}",
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // With -a each address starts a group: "0x...", then name and place pairs.
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("0x") {
            groups.push(Vec::new());
        } else if let Some(group) = groups.last_mut() {
            group.push(line.to_string());
            lines.next(); // the file:line that follows each name
        }
    }
    if groups.len() != asked {
        return Err(io::Error::other(format!(
            "addr2line answered {} of {asked} addresses",
            groups.len()
        )));
    }
    Ok(groups)
}

/// This process's file mappings and its vDSO (`/proc/self/maps`): start, end, file
/// offset, path.
struct Maps(Vec<(usize, usize, usize, String)>);

impl Maps {
    fn read() -> io::Result<Maps> {
        let text = std::fs::read_to_string("/proc/self/maps")?;
        let hex = |s: &str| usize::from_str_radix(s, 16).ok();
        Ok(Maps(
            text.lines()
                .filter_map(|line| {
                    // Five fields, then the path (which may hold spaces).
                    let mut fields = line.splitn(6, ' ');
                    let (start, end) = fields.next()?.split_once('-')?;
                    let offset = fields.nth(1)?;
                    let path = fields.nth(2)?.trim_start();
                    // Files, and the kernel's [vdso] (clock_gettime runs there).
                    (path.starts_with('/') || path == "[vdso]").then_some(())?;
                    Some((hex(start)?, hex(end)?, hex(offset)?, path.to_string()))
                })
                .collect(),
        ))
    }

    /// Where `path` was loaded: the start of its mapping at file offset 0 (for a
    /// position-independent executable, whose first segment has address 0, an
    /// address minus this is what addr2line wants; Rust builds such executables on
    /// Linux by default, and a non-PIE one would need no subtraction).
    fn base_of(&self, path: &str) -> Option<usize> {
        self.0
            .iter()
            .find(|(_, _, offset, p)| p == path && *offset == 0)
            .map(|(start, ..)| *start)
    }

    /// The file `pc` lies in, and its offset in that file.
    fn file_of(&self, pc: usize) -> Option<(&str, usize)> {
        self.0
            .iter()
            .find(|(start, end, ..)| (*start..*end).contains(&pc))
            .map(|(start, _, offset, path)| (path.as_str(), pc - start + offset))
    }
}

/// The signals blocked on may's threads (and on a plain thread while its fiber
/// runs), as the calling thread's `pthread_sigmask` sees them once blocked: every
/// signal from 1 to `SIGRTMAX` but the synchronous ones the crate leaves unblocked,
/// `SIGKILL` and `SIGSTOP` (which no mask holds) and the two glibc keeps for itself
/// (see the crate docs, "Signals"). What `tests/hazards.rs` aims at a fiber near its
/// guard page.
pub fn blocked_on_may_threads() -> Vec<libc::c_int> {
    let set = crate::signal::blocked_while_running();
    (1..=libc::SIGRTMAX())
        // SAFETY: `set` is an initialised signal set; sigismember only reads it.
        .filter(|&sig| unsafe { libc::sigismember(&set, sig) } == 1)
        .filter(|&sig| !matches!(sig, libc::SIGKILL | libc::SIGSTOP))
        // glibc's own (SIGCANCEL, SIGSETXID): the signals below SIGRTMIN above 31.
        .filter(|&sig| !(32..libc::SIGRTMIN()).contains(&sig))
        .collect()
}

/// The synchronous signals the crate leaves unblocked while a fiber runs.
pub fn left_unblocked() -> &'static [libc::c_int] {
    &crate::signal::LEFT_UNBLOCKED
}

/// Bytes the allocator has handed out and not had back (glibc's `mallinfo2`:
/// arenas' in-use chunks plus mmap'ed ones): what a leak grows, whatever the
/// allocator keeps cached.
pub fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 takes no arguments and returns a struct by value; it
    // only reads the allocator's statistics (under its own locks).
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

/// [`FiberSafeAlloc`](crate::FiberSafeAlloc), counting the allocations it hands out
/// (`alloc`, `alloc_zeroed`, `realloc`): for a test that a path allocates nothing, as
/// its binary's global allocator. The count is the process's ([`allocations`]).
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: fiber_pool::testing::CountingAlloc = fiber_pool::testing::CountingAlloc;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Allocations [`CountingAlloc`] has handed out in this process so far.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

// SAFETY: every method forwards its arguments unchanged to `FiberSafeAlloc`, which
// implements the `GlobalAlloc` contract; the count before it is one atomic add, which
// neither allocates, unwinds, nor touches the memory involved.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, forwarded.
        unsafe { crate::FiberSafeAlloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc_zeroed`, forwarded.
        unsafe { crate::FiberSafeAlloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, forwarded (`ptr` came from
        // `FiberSafeAlloc`).
        unsafe { crate::FiberSafeAlloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc`, forwarded.
        unsafe { crate::FiberSafeAlloc.realloc(ptr, layout, new_size) }
    }
}

/// Gives the memory the allocator keeps free back to the kernel (glibc's
/// `malloc_trim(0)`: the top of each arena, and free pages inside them), so that
/// resident memory measured after it shows what is used, not what is cached.
pub fn trim_heap() {
    // SAFETY: malloc_trim may be called at any time from any thread; it takes
    // the arenas' locks itself and only releases free memory.
    unsafe { libc::malloc_trim(0) };
}

/// A frame that skips ahead without touching the pages in between, as C's `alloca`
/// or a variable-length array does: moves the stack pointer `bytes` down, stores one
/// word there, and moves it back. On a fiber with fewer than `bytes` of stack left the
/// store lands in the guard below the stack, and the job overflows (for an adversarial
/// app to show that the guard is wide enough). Panics off a fiber, for a jump of less
/// than a word (the store would overwrite the caller's own slot at the stack pointer),
/// and for a jump of more than half the guard, one that could pass it.
#[cfg(target_arch = "x86_64")]
pub fn skip_down(bytes: usize) {
    assert!(crate::on_fiber(), "skip_down runs on a fiber only");
    assert!(
        bytes >= 8,
        "skip_down({bytes}): at least a word below the stack pointer"
    );
    assert!(
        bytes <= crate::config::GUARD_SIZE / 2,
        "skip_down({bytes}): at most half the {}-byte guard",
        crate::config::GUARD_SIZE
    );
    // SAFETY: on a fiber, the word `bytes` (at least 8) below the stack pointer is in
    // this fiber's own unused stack, below every live slot of the caller's, or in its
    // guard, which is at least twice `bytes` of PROT_NONE below the usable
    // stack (the asserts above): the store overwrites nothing live, or faults on the
    // guard, which the pool's handler turns into this job's overflow (a synchronous
    // fault, handled on the alternate signal stack; asynchronous signals are blocked
    // while a fiber runs, so nothing else uses the stack below the moved pointer). The
    // stack pointer is put back before anything else runs.
    unsafe {
        std::arch::asm!(
            "sub rsp, {jump}",
            "mov qword ptr [rsp], 0",
            "add rsp, {jump}",
            jump = in(reg) bytes,
        );
    }
}

/// Recurses (32-byte pads) until at most `left` bytes of the running fiber's stack
/// remain, then runs `f`: how a sweep moves the point where the code under test runs
/// out of stack, in steps much finer than a page. Panics off a fiber.
#[inline(never)]
pub fn with_stack_left<R>(left: usize, f: &mut dyn FnMut() -> R) -> R {
    let mut pad = [0u8; 32];
    std::hint::black_box(&mut pad);
    if crate::stack_remaining().expect("with_stack_left runs on a fiber") <= left {
        f()
    } else {
        with_stack_left(left, f)
    }
}

/// A listener whose backlog is full and that never accepts: the kernel drops further
/// SYNs, so a connect to [`addr`](Self::addr) stays in progress until its own
/// timeout. Kept open as long as this value lives.
pub struct UnansweringListener {
    /// Where to connect.
    pub addr: std::net::SocketAddr,
    _socket: socket2::Socket,
    _filling: Vec<std::net::TcpStream>,
}

impl UnansweringListener {
    /// Binds one on a loopback port and fills its backlog of one.
    pub fn new() -> io::Result<UnansweringListener> {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        let any: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        socket.bind(&any.into())?;
        socket.listen(0)?;
        let addr = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("the listener has no inet address"))?;
        let filling = (0..4)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(100))
                    .ok()
            })
            .collect();
        Ok(UnansweringListener {
            addr,
            _socket: socket,
            _filling: filling,
        })
    }
}

/// The lowest usable address of the running fiber's stack (just above its guard);
/// its top is that plus the pool's `stack_size`. `None` off a fiber. What
/// `tests/trap_area.rs` reads the stack's top from.
pub fn running_stack_bottom() -> Option<usize> {
    crate::stack_check::running_entry().map(crate::registry::StackEntry::guard_end)
}
