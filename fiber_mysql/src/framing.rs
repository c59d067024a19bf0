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
//!   [`Framing::finish_packet`]). A command and the first read of its answer go in
//!   one call of the socket ([`Framing::flush_then_next`], [`Exchange`]): on a fiber
//!   each call is a switch to the carrier, about 200 instructions.
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

/// The most bytes [`Framing::flush_then_next`] sends in the same call as its read. A
/// command this small goes into the socket's send buffer (16 KiB at least on Linux)
/// at once, so the read's timeout, which the caller sets before the call, is the one
/// it would set after the send. A larger one (a long parameter, a large pipeline) is
/// sent first and its answer read apart, with a timeout set after the send.
const MERGED_WRITE_MAX: usize = 4 * 1024;

/// A socket that sends and then reads in one call: [`crate::stream::Stream`] makes it
/// one switch to the carrier on a fiber, where a write and a read make two.
pub(crate) trait Exchange: Read + Write {
    /// Writes all of `out`, then reads once into `buf`. The outer error is the
    /// write's (nothing was read); the inner result is the read's.
    fn write_all_then_read(&mut self, out: &[u8], buf: &mut [u8]) -> io::Result<io::Result<usize>>;
}

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
        self.sent();
        result
    }

    /// [`Self::flush`], then [`Self::next`]: the command and the first read of its
    /// answer in one call of `io` when the command is at most [`MERGED_WRITE_MAX`]
    /// bytes and nothing of an answer is buffered yet (the usual case: every answer is
    /// read whole before the next command). The outer error is the write's; the inner
    /// result is the read's, as [`Self::next`] gives it.
    pub(crate) fn flush_then_next(
        &mut self,
        io: &mut impl Exchange,
    ) -> Result<Result<Payload, FrameError>, FrameError> {
        debug_assert!(self.open.is_none(), "a packet is still being written");
        if !self.sends_with_read() {
            self.flush(io)?;
            return Ok(self.next(io));
        }
        self.make_room(HEADER);
        let read = io.write_all_then_read(&self.write, &mut self.read[self.filled..]);
        self.sent();
        match read.map_err(FrameError::Io)? {
            Ok(0) => return Ok(Err(FrameError::Closed)),
            Ok(n) => self.filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Ok(Err(FrameError::Io(e))),
        }
        Ok(self.next(io))
    }

    /// Whether [`Self::flush_then_next`] sends what is queued in the same call as its
    /// read: a command of at most [`MERGED_WRITE_MAX`] bytes, with nothing of an
    /// answer buffered.
    pub(crate) fn sends_with_read(&self) -> bool {
        !self.write.is_empty() && self.write.len() <= MERGED_WRITE_MAX && self.filled == self.start
    }

    /// Empties the write buffer after a send.
    fn sent(&mut self) {
        self.write.clear();
        if self.write.capacity() > 4 * READ_BUFFER {
            // Done with a large command: give the memory back.
            self.write.shrink_to(READ_BUFFER);
        }
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
        self.make_room(want);
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

    /// Moves the unparsed bytes to the front of the read buffer, and sizes it for
    /// `want` of them.
    fn make_room(&mut self, want: usize) {
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

    /// A socket that keeps what is written, answers with a [`Dribble`], and counts
    /// its calls: one `write_all_then_read` is one switch to the carrier.
    struct Wire {
        sent: Vec<u8>,
        answer: Dribble,
        refuse_writes: bool,
        exchanges: usize,
        writes: usize,
    }

    impl Read for Wire {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.answer.read(buf)
        }
    }

    impl Write for Wire {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            if self.refuse_writes {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            self.sent.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Exchange for Wire {
        fn write_all_then_read(
            &mut self,
            out: &[u8],
            buf: &mut [u8],
        ) -> io::Result<io::Result<usize>> {
            self.exchanges += 1;
            self.write_all(out)?;
            Ok(self.read(buf))
        }
    }

    fn wire(answer: Vec<u8>, step: usize) -> Wire {
        Wire {
            sent: Vec::new(),
            answer: Dribble {
                data: answer,
                at: 0,
                step,
            },
            refuse_writes: false,
            exchanges: 0,
            writes: 0,
        }
    }

    /// An answer framed as the server sends it: sequence ids from 1.
    fn answer(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            out.extend_from_slice(&header(p.len(), 1 + i as u8));
            out.extend_from_slice(p);
        }
        out
    }

    #[test]
    fn a_command_goes_out_with_the_first_read_of_its_answer() {
        let long = vec![3u8; 40_000];
        for step in [1, 3, 5, 1 << 20] {
            let mut io = wire(answer(&[b"ok", &long]), step);
            let mut f = Framing::new(64 << 20);
            f.begin_command();
            f.queue(b"command");
            let p = f.flush_then_next(&mut io).unwrap().unwrap();
            assert_eq!(f.payload(&p), b"ok", "step {step}");
            assert_eq!(io.sent, framed(&[b"command"]));
            assert_eq!(io.exchanges, 1);
            assert_eq!(f.queued(), 0);
            let p = f.next(&mut io).unwrap();
            assert!(f.payload(&p) == &long[..], "step {step}");
        }
    }

    #[test]
    fn a_failed_send_reads_nothing_and_a_closed_socket_is_closed() {
        let mut io = wire(answer(&[b"never read"]), 100);
        io.refuse_writes = true;
        let mut f = Framing::new(1 << 20);
        f.begin_command();
        f.queue(b"command");
        assert!(matches!(f.flush_then_next(&mut io), Err(FrameError::Io(_))));
        assert_eq!(io.answer.at, 0, "nothing was read");
        assert_eq!(f.queued(), 0, "what failed to go is not sent again");

        let mut io = wire(Vec::new(), 100);
        let mut f = Framing::new(1 << 20);
        f.begin_command();
        f.queue(b"command");
        assert!(matches!(
            f.flush_then_next(&mut io),
            Ok(Err(FrameError::Closed))
        ));
    }

    #[test]
    fn a_large_command_is_sent_before_its_answer_is_read() {
        let mut io = wire(answer(&[b"ok"]), 100);
        let mut f = Framing::new(1 << 20);
        f.begin_command();
        f.queue(&vec![1u8; MERGED_WRITE_MAX]);
        let p = f.flush_then_next(&mut io).unwrap().unwrap();
        assert_eq!(f.payload(&p), b"ok");
        assert_eq!((io.exchanges, io.writes), (0, 1));
        assert_eq!(io.sent.len(), MERGED_WRITE_MAX + 4);
    }

    #[test]
    fn with_an_answer_already_buffered_the_send_and_the_read_go_apart() {
        // Two answers arrive in one read; the second is parsed from the buffer.
        let mut io = wire(answer(&[b"first"]), 1 << 20);
        io.answer.data.extend_from_slice(&answer(&[b"second"]));
        let mut f = Framing::new(1 << 20);
        f.begin_command();
        f.queue(b"one");
        let p = f.flush_then_next(&mut io).unwrap().unwrap();
        assert_eq!(f.payload(&p), b"first");
        f.begin_command();
        f.queue(b"two");
        f.expect_answer();
        let p = f.flush_then_next(&mut io).unwrap().unwrap();
        assert_eq!(f.payload(&p), b"second");
        assert_eq!((io.exchanges, io.writes), (1, 2));
    }
}
