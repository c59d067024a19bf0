//! MySQL's packet framing over a connection's socket, with no allocation per packet:
//! each packet is a 4-byte header (a 24-bit payload length and a sequence id) and its
//! payload.
//!
//! - **Reading**: one buffer, filled by as few reads as the socket allows (a whole
//!   small result set usually arrives in one), that payloads are parsed from in
//!   place: [`Framing::next`] gives the payload's place in the buffer, valid until
//!   the next read. A payload of 16 MiB or more arrives split into packets of
//!   `0xFFFFFF` bytes and a shorter last one; those are joined in a second buffer.
//! - **Writing**: commands are queued in one buffer and sent by one write
//!   ([`Framing::flush`]), so that several commands can go out together (a reset's
//!   three, or a pipeline of statements). A payload is written straight into the
//!   buffer behind a header filled in afterwards ([`Framing::start_packet`],
//!   [`Framing::finish_packet`]).
//!
//! The sequence id restarts at 0 with every command and counts every packet both
//! ways; a packet that arrives out of sequence means the stream is out of step.

use std::io::{self, Read, Write};
use std::ops::Range;

/// The largest payload one packet carries; a longer one is split.
const MAX_CHUNK: usize = 0xFF_FFFF;
/// Bytes of a packet header.
const HEADER: usize = 4;
/// The read buffer's size to begin with, and what it shrinks back to after a large
/// result: most answers fit.
const READ_BUFFER: usize = 16 * 1024;

/// What went wrong below the protocol.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The socket's own error (a timeout among them).
    Io(io::Error),
    /// The server closed the connection.
    Closed,
    /// A packet's sequence id was not the next one.
    OutOfSync,
    /// A payload over the largest we accept.
    TooLarge,
}

/// Where the payload [`Framing::next`] read is: a range of the read buffer, or the
/// buffer that joined a split payload.
#[derive(Debug, Clone)]
pub(crate) struct Payload {
    range: Range<usize>,
    joined: bool,
}

/// One connection's buffers and sequence id; see the module comment.
#[derive(Debug)]
pub(crate) struct Framing {
    /// Bytes read: `[start..filled)` not parsed yet. Its length is its capacity,
    /// zeroed once, so that reads go into initialised memory.
    read: Vec<u8>,
    start: usize,
    filled: usize,
    /// A payload of several packets, joined.
    joined: Vec<u8>,
    /// Bytes queued to send.
    write: Vec<u8>,
    /// Where the header of the packet being written starts ([`Self::start_packet`]).
    open: Option<usize>,
    /// The sequence id of the next packet, either way.
    seq: u8,
    /// The largest payload accepted.
    max_payload: usize,
}

impl Framing {
    /// Empty buffers, accepting payloads of up to `max_payload` bytes.
    pub(crate) fn new(max_payload: usize) -> Framing {
        Framing {
            read: vec![0; READ_BUFFER],
            start: 0,
            filled: 0,
            joined: Vec::new(),
            write: Vec::with_capacity(READ_BUFFER),
            open: None,
            seq: 0,
            max_payload,
        }
    }

    /// A new command begins: its first packet has sequence id 0.
    pub(crate) fn begin_command(&mut self) {
        self.seq = 0;
    }

    /// The answer to a command queued earlier comes next (after a pipeline's
    /// earlier answers): its first packet has sequence id 1.
    pub(crate) fn expect_answer(&mut self) {
        self.seq = 1;
    }

    /// The answer to a command queued earlier comes next, its first packet with
    /// sequence id `seq`: what [`Self::next_seq`] said after the command was queued
    /// (1, or more for a command split into several packets).
    pub(crate) fn expect_answer_at(&mut self, seq: u8) {
        self.seq = seq;
    }

    /// The sequence id the next packet gets: after a command is queued, the one its
    /// answer starts at.
    pub(crate) fn next_seq(&self) -> u8 {
        self.seq
    }

    /// Queues one packet holding `payload` (split if it is 16 MiB or more).
    pub(crate) fn queue(&mut self, payload: &[u8]) {
        let at = self.start_packet();
        self.write.extend_from_slice(payload);
        self.finish_packet(at);
    }

    /// Starts a packet whose payload the caller appends to [`Self::out`]; returns
    /// what [`Self::finish_packet`] takes.
    pub(crate) fn start_packet(&mut self) -> usize {
        let at = self.write.len();
        self.write.extend_from_slice(&[0; HEADER]);
        self.open = Some(at);
        at
    }

    /// The write buffer, to append the open packet's payload to.
    pub(crate) fn out(&mut self) -> &mut Vec<u8> {
        &mut self.write
    }

    /// Fills in the header of the packet started at `at`, splitting its payload into
    /// packets of `0xFFFFFF` bytes (and a shorter last one, empty if need be) when it
    /// is that long.
    pub(crate) fn finish_packet(&mut self, at: usize) {
        self.open = None;
        let len = self.write.len() - at - HEADER;
        if len < MAX_CHUNK {
            self.write[at..at + HEADER].copy_from_slice(&header(len, self.seq));
            self.seq = self.seq.wrapping_add(1);
            return;
        }
        // Rare (a parameter of 16 MiB or more): re-frame the payload in chunks.
        let payload = self.write.split_off(at + HEADER);
        self.write.truncate(at);
        let mut chunks = payload.chunks(MAX_CHUNK).peekable();
        while let Some(chunk) = chunks.next() {
            self.write.extend_from_slice(&header(chunk.len(), self.seq));
            self.write.extend_from_slice(chunk);
            self.seq = self.seq.wrapping_add(1);
            if chunks.peek().is_none() && chunk.len() == MAX_CHUNK {
                self.write.extend_from_slice(&header(0, self.seq));
                self.seq = self.seq.wrapping_add(1);
            }
        }
    }

    /// Sends everything queued, in one write when the socket takes it.
    pub(crate) fn flush(&mut self, io: &mut impl Write) -> Result<(), FrameError> {
        debug_assert!(self.open.is_none(), "a packet is still being written");
        let result = io.write_all(&self.write).map_err(FrameError::Io);
        self.write.clear();
        if self.write.capacity() > 4 * READ_BUFFER {
            // Done with a large command: give the memory back.
            self.write.shrink_to(READ_BUFFER);
        }
        result
    }

    /// Bytes queued and not sent yet.
    pub(crate) fn queued(&self) -> usize {
        self.write.len()
    }

    /// Forgets what was queued and not sent (the connection is being given up).
    pub(crate) fn discard_queued(&mut self) {
        self.write.clear();
        self.open = None;
    }

    /// Reads the next payload, from the buffer if it is there, else from `io`.
    pub(crate) fn next(&mut self, io: &mut impl Read) -> Result<Payload, FrameError> {
        let (range, last) = self.next_packet(io)?;
        if last {
            return Ok(Payload {
                range,
                joined: false,
            });
        }
        self.joined.clear();
        // A joined payload is 16 MiB or more; the last one's buffer is not kept for
        // the life of the connection.
        self.joined.shrink_to(MAX_CHUNK);
        self.joined.extend_from_slice(&self.read[range]);
        loop {
            let (range, last) = self.next_packet(io)?;
            if self.joined.len() + range.len() > self.max_payload {
                return Err(FrameError::TooLarge);
            }
            self.joined.extend_from_slice(&self.read[range]);
            if last {
                let len = self.joined.len();
                return Ok(Payload {
                    range: 0..len,
                    joined: true,
                });
            }
        }
    }

    /// The bytes of `payload`, the one [`Self::next`] returned last.
    pub(crate) fn payload(&self, payload: &Payload) -> &[u8] {
        if payload.joined {
            &self.joined[payload.range.clone()]
        } else {
            &self.read[payload.range.clone()]
        }
    }

    /// One packet: its payload's range in the read buffer, and whether it is the
    /// last of its payload (shorter than `0xFFFFFF`).
    fn next_packet(&mut self, io: &mut impl Read) -> Result<(Range<usize>, bool), FrameError> {
        let len = loop {
            if self.filled - self.start >= HEADER {
                let h = &self.read[self.start..self.start + HEADER];
                let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
                if len > self.max_payload {
                    return Err(FrameError::TooLarge);
                }
                if self.filled - self.start >= HEADER + len {
                    if h[3] != self.seq {
                        return Err(FrameError::OutOfSync);
                    }
                    break len;
                }
                self.fill(io, HEADER + len)?;
            } else {
                self.fill(io, HEADER)?;
            }
        };
        self.seq = self.seq.wrapping_add(1);
        let from = self.start + HEADER;
        self.start = from + len;
        Ok((from..from + len, len < MAX_CHUNK))
    }

    /// Reads until at least `want` unparsed bytes are buffered: moves them to the
    /// front first, and grows the buffer if they would not fit.
    fn fill(&mut self, io: &mut impl Read, want: usize) -> Result<(), FrameError> {
        let have = self.filled - self.start;
        if self.start > 0 {
            self.read.copy_within(self.start..self.filled, 0);
            self.start = 0;
            self.filled = have;
        }
        if self.read.len() < want {
            self.read.resize(want.max(2 * self.read.len()), 0);
        } else if have == 0 && self.read.len() > 4 * READ_BUFFER && want <= READ_BUFFER {
            // Done with a large result: give the memory back.
            self.read.truncate(READ_BUFFER);
            self.read.shrink_to_fit();
        }
        while self.filled < want {
            match io.read(&mut self.read[self.filled..]) {
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
        Ok(())
    }
}

/// A packet header: the payload's length (under 16 MiB) and the sequence id.
fn header(len: usize, seq: u8) -> [u8; HEADER] {
    // Truncation to the low three bytes is the format; callers keep `len` below 2^24.
    [len as u8, (len >> 8) as u8, (len >> 16) as u8, seq]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out `data` in pieces of `step` bytes.
    struct Dribble {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut f = Framing::new(64 << 20);
        f.begin_command();
        for p in payloads {
            f.queue(p);
        }
        let mut out = Vec::new();
        f.flush(&mut out).unwrap();
        out
    }

    #[test]
    fn payloads_come_back_whole_however_the_socket_splits_them() {
        let long = vec![7u8; 40_000];
        let wire = framed(&[b"one", b"", &long, b"four"]);
        for step in [1, 3, 4, 5, 1000, 1 << 20] {
            let mut io = Dribble {
                data: wire.clone(),
                at: 0,
                step,
            };
            let mut f = Framing::new(64 << 20);
            let mut got = Vec::new();
            for _ in 0..4 {
                let p = f.next(&mut io).unwrap();
                got.push(f.payload(&p).to_vec());
            }
            assert_eq!(
                got,
                vec![b"one".to_vec(), vec![], long.clone(), b"four".to_vec()]
            );
            assert!(matches!(f.next(&mut io), Err(FrameError::Closed)));
        }
    }

    #[test]
    fn a_payload_of_16_mib_or_more_is_split_and_joined() {
        for len in [MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK + 5] {
            let big: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let wire = framed(&[&big, b"after"]);
            let mut io = Dribble {
                data: wire,
                at: 0,
                step: 1 << 20,
            };
            let mut f = Framing::new(64 << 20);
            let p = f.next(&mut io).unwrap();
            assert!(f.payload(&p) == &big[..], "{len} bytes");
            let p = f.next(&mut io).unwrap();
            assert_eq!(f.payload(&p), b"after");
        }
    }

    #[test]
    fn a_packet_out_of_sequence_or_too_large_is_refused() {
        let mut wire = framed(&[b"a", b"b"]);
        wire[4 + 1 + 3] = 9; // the second packet's sequence id
        let mut io = Dribble {
            data: wire,
            at: 0,
            step: 100,
        };
        let mut f = Framing::new(64 << 20);
        f.next(&mut io).unwrap();
        assert!(matches!(f.next(&mut io), Err(FrameError::OutOfSync)));

        let wire = framed(&[&[0u8; 100]]);
        let mut io = Dribble {
            data: wire,
            at: 0,
            step: 100,
        };
        let mut f = Framing::new(99);
        assert!(matches!(f.next(&mut io), Err(FrameError::TooLarge)));
    }

    #[test]
    fn an_answer_to_a_queued_command_starts_at_sequence_one() {
        let mut f = Framing::new(1 << 20);
        f.begin_command();
        f.queue(b"first");
        f.begin_command();
        f.queue(b"second");
        let mut out = Vec::new();
        f.flush(&mut out).unwrap();
        assert_eq!(&out[..4], &[5, 0, 0, 0]);
        assert_eq!(&out[9..13], &[6, 0, 0, 0]);
        // The server answers each with sequence id 1.
        let mut answers = Vec::new();
        for payload in [&b"ok1"[..], b"ok2"] {
            answers.extend_from_slice(&header(payload.len(), 1));
            answers.extend_from_slice(payload);
        }
        let mut io = Dribble {
            data: answers,
            at: 0,
            step: 1000,
        };
        for want in [&b"ok1"[..], b"ok2"] {
            f.expect_answer();
            let p = f.next(&mut io).unwrap();
            assert_eq!(f.payload(&p), want);
        }
    }
}
