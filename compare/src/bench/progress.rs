//! The bench's progress line on stderr: redrawn in place on a terminal, a line per
//! step elsewhere (a log, CI).
//!
//! On a terminal the line has no newline while it is drawn, so anything else printed
//! then would be glued to it and erased by the next redraw. Nothing is lost that way:
//! messages go through [`Progress::note`] (which clears the line, prints, and redraws),
//! and the line is ended before the summary and when the bench stops early (on drop,
//! before `main` prints the error).

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The progress line on stderr: redrawn in place on a terminal, a line per step elsewhere.
pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
    /// The line on screen without its newline (terminal only).
    drawn: Option<String>,
    /// stderr (a buffer in tests). Write errors are ignored, as `eprint!` would panic.
    out: Box<dyn Write>,
}

/// Carriage return, then erase the whole line (ECMA-48 EL 2).
const CLEAR_LINE: &str = "\r\x1b[2K";

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
            drawn: None,
            out: Box::new(std::io::stderr()),
        }
    }

    fn print(&mut self, text: std::fmt::Arguments<'_>) {
        let _ = self.out.write_fmt(text);
        let _ = self.out.flush();
    }

    pub fn step(&mut self, what: &str) {
        self.done += 1;
        let width = 20;
        let filled = width * (self.done - 1) / self.total.max(1);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width - filled));
        let line = format!("bench [{bar}] {:>2}/{} {what}", self.done, self.total);
        if self.tty {
            self.print(format_args!("{CLEAR_LINE}{line}"));
            self.drawn = Some(line);
        } else {
            self.print(format_args!("{line}\n"));
        }
    }

    /// Print `message` on a line of its own, above the progress line (which is redrawn
    /// below it on a terminal).
    pub fn note(&mut self, message: impl std::fmt::Display) {
        match self.drawn.clone() {
            Some(line) => self.print(format_args!("{CLEAR_LINE}{message}\n{line}")),
            None => self.print(format_args!("{message}\n")),
        }
    }

    pub fn done(&mut self, took: Duration) {
        self.end_line();
        let total = self.total;
        self.print(format_args!(
            "bench: {total} measurements in {:.0} s\n",
            took.as_secs_f64()
        ));
    }

    /// End the drawn line, so that what comes next starts on a line of its own.
    fn end_line(&mut self) {
        if self.drawn.take().is_some() {
            self.print(format_args!("\n"));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end_line();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A sink the test can read back after the Progress that writes to it is gone.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What a terminal shows for `bytes`: `CLEAR_LINE` empties the current line.
    fn screen(bytes: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(bytes);
        let mut lines = vec![String::new()];
        for (i, part) in text.split(CLEAR_LINE).enumerate() {
            if i > 0 {
                lines.last_mut().unwrap().clear();
            }
            for (j, piece) in part.split('\n').enumerate() {
                if j > 0 {
                    lines.push(String::new());
                }
                lines.last_mut().unwrap().push_str(piece);
            }
        }
        lines
    }

    fn on_terminal(sink: &Shared) -> Progress {
        Progress {
            total: 3,
            done: 0,
            tty: true,
            drawn: None,
            out: Box::new(sink.clone()),
        }
    }

    #[test]
    fn a_note_keeps_its_own_line_and_the_bar_stays_below() {
        let sink = Shared::default();
        let mut p = on_terminal(&sink);
        p.step("first");
        p.note("bench: first failed");
        p.step("second");
        p.done(Duration::from_secs(2));
        let shown = screen(&sink.0.lock().unwrap());
        assert_eq!(shown[0], "bench: first failed", "{shown:?}");
        assert!(shown[1].ends_with("2/3 second"), "{shown:?}");
        assert_eq!(shown[2], "bench: 3 measurements in 2 s", "{shown:?}");
    }

    #[test]
    fn stopping_early_ends_the_line_before_the_error() {
        let sink = Shared::default();
        let mut p = on_terminal(&sink);
        p.step("first");
        drop(p); // as when `run` returns an error that `main` then prints
        let shown = screen(&sink.0.lock().unwrap());
        assert!(shown[0].ends_with("1/3 first"), "{shown:?}");
        assert_eq!(
            shown.last().unwrap(),
            "",
            "the cursor is on a fresh line: {shown:?}"
        );
    }
}
