//! Test support (feature `testing`): which function an overflow's faulting
//! instruction was in.
//!
//! [`RunError::StackOverflow`](crate::RunError::StackOverflow) carries the
//! address of the instruction that touched the guard page. Tests that overflow
//! fibers on purpose resolve those addresses here to say where overflows strike
//! (in a handler's own code, in `reserve_stack`, never inside may or generator).
//! Resolution is binutils' `addr2line` run on this process's executable, so it
//! needs the binary's symbols (test and debug builds have them; release builds
//! of this workspace keep line tables, `debug = 1`).

use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Stdio};

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

/// Resolve addresses inside this process's executable to their functions. An
/// address outside it (a shared library's, or 0) resolves to `??`.
pub fn locate(pcs: &[usize]) -> io::Result<Vec<Located>> {
    let exe = std::env::current_exe()?;
    let base = load_address(&exe)?;
    let mut child = Command::new("addr2line")
        .args(["-a", "-f", "-C", "-i", "-e"])
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("addr2line (binutils): {e}")))?;
    {
        let mut stdin = child.stdin.take().expect("piped stdin");
        for &pc in pcs {
            // Outside the executable: an address addr2line resolves to nothing.
            writeln!(stdin, "{:#x}", pc.saturating_sub(base))?;
        }
    }
    let out = child.wait_with_output()?;
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
    if groups.len() != pcs.len() {
        return Err(io::Error::other(format!(
            "addr2line answered {} of {} addresses",
            groups.len(),
            pcs.len()
        )));
    }
    Ok(pcs
        .iter()
        .zip(groups)
        .map(|(&pc, functions)| Located { pc, functions })
        .collect())
}

/// The address the executable was loaded at: the start of its mapping at file
/// offset 0 in `/proc/self/maps` (for a position-independent executable, whose
/// first segment has address 0, an address minus this is what addr2line wants).
fn load_address(exe: &Path) -> io::Result<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let exe = exe.to_string_lossy();
    maps.lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let offset = fields.nth(1)?;
            let path = fields.nth(2)?;
            (path == exe && usize::from_str_radix(offset, 16).ok()? == 0)
                .then(|| usize::from_str_radix(range.split('-').next()?, 16).ok())
                .flatten()
        })
        .ok_or_else(|| io::Error::other(format!("{exe} is not in /proc/self/maps")))
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

/// Gives the memory the allocator keeps free back to the kernel (glibc's
/// `malloc_trim(0)`: the top of each arena, and free pages inside them), so that
/// resident memory measured after it shows what is used, not what is cached.
pub fn trim_heap() {
    // SAFETY: malloc_trim may be called at any time from any thread; it takes
    // the arenas' locks itself and only releases free memory.
    unsafe { libc::malloc_trim(0) };
}
