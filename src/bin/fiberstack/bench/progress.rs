//! The bench's progress line on stderr: redrawn in place on a terminal, a line per
//! step elsewhere (a log, CI).

use std::io::IsTerminal;
use std::time::Duration;

/// The progress line on stderr: redrawn in place on a terminal, a line per step elsewhere.
pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
        }
    }

    pub fn step(&mut self, what: &str) {
        self.done += 1;
        let width = 20;
        let filled = width * (self.done - 1) / self.total.max(1);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width - filled));
        let line = format!("bench [{bar}] {:>2}/{} {what}", self.done, self.total);
        if self.tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }

    pub fn done(&self, took: Duration) {
        if self.tty {
            eprintln!();
        }
        eprintln!(
            "bench: {} measurements in {:.0} s",
            self.total,
            took.as_secs_f64()
        );
    }
}
