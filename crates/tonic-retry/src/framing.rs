//! gRPC's length-prefixed framing, counted as it streams by.
//!
//! Two readers need to know where messages begin and end in a body that
//! arrives in chunks splitting prefixes anywhere: the layer's commit rule
//! (is the first response message whole? has a second begun?) and gRFC
//! A66's sizes, which count message bytes without the 5-byte prefix of
//! each message (a compression flag and a length). [`FrameCounter`] keeps
//! the state of one prefix across chunks and answers both.

/// The messages and payload bytes (prefixes excluded) of a gRPC body fed
/// in chunks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FrameCounter {
    /// The prefix of the message being read, and how much of it is in.
    prefix: [u8; 5],
    have: usize,
    /// Bytes of the current message still to come (0: reading a prefix).
    left: u64,
    payload: u64,
    /// Messages of which a byte is in, and messages wholly in.
    begun: u64,
    whole: u64,
}

impl FrameCounter {
    /// Count one chunk.
    pub(crate) fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.left > 0 {
                let n = (chunk.len() as u64).min(self.left);
                self.payload = self.payload.saturating_add(n);
                self.left -= n;
                chunk = &chunk[n as usize..];
                if self.left == 0 {
                    self.whole += 1;
                }
                continue;
            }
            if self.have == 0 {
                self.begun += 1;
            }
            let n = (5 - self.have).min(chunk.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&chunk[..n]);
            self.have += n;
            chunk = &chunk[n..];
            if self.have == 5 {
                let p = self.prefix;
                self.left = u64::from(u32::from_be_bytes([p[1], p[2], p[3], p[4]]));
                self.have = 0;
                if self.left == 0 {
                    self.whole += 1;
                }
            }
        }
    }

    /// The payload bytes counted so far.
    pub(crate) fn payload(&self) -> u64 {
        self.payload
    }

    /// Whether the first message is wholly in (prefix and payload).
    pub(crate) fn first_message_whole(&self) -> bool {
        self.whole >= 1
    }

    /// Whether a byte beyond the first message is in: a second has begun.
    pub(crate) fn more_than_one_message(&self) -> bool {
        self.begun > 1
    }
}

/// The payload bytes of whole buffered chunks (a buffered request's size).
#[cfg(any(feature = "otel", test))]
pub(crate) fn payload_len<'a>(chunks: impl IntoIterator<Item = &'a bytes::Bytes>) -> u64 {
    let mut counter = FrameCounter::default();
    for chunk in chunks {
        counter.feed(chunk);
    }
    counter.payload()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0];
        m.extend((len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(7, len));
        m
    }

    /// Any split of three messages (one empty) counts their payload only.
    #[test]
    fn prefixes_are_not_counted_whatever_the_split() {
        let mut body = message(3);
        body.extend(message(0));
        body.extend(message(300));
        for cut in 0..body.len() {
            for cut2 in cut..body.len() {
                let chunks = [
                    Bytes::copy_from_slice(&body[..cut]),
                    Bytes::copy_from_slice(&body[cut..cut2]),
                    Bytes::copy_from_slice(&body[cut2..]),
                ];
                assert_eq!(payload_len(&chunks), 303, "{cut} {cut2}");
            }
        }
        let partial = [Bytes::copy_from_slice(&body[..7])];
        assert_eq!(
            payload_len(&partial),
            2,
            "a message cut short counts what came"
        );
    }

    /// The commit rule's questions, fed one chunk at a time.
    #[test]
    fn first_message_whole_and_a_second_begun() {
        let one = message(3);
        let mut c = FrameCounter::default();
        c.feed(&one[..2]);
        assert!(!c.more_than_one_message() && !c.first_message_whole());
        c.feed(&one[2..6]);
        assert!(!c.first_message_whole());
        c.feed(&one[6..]);
        assert!(!c.more_than_one_message() && c.first_message_whole());
        c.feed(&[0]);
        assert!(c.more_than_one_message());
        // An empty message is whole once its prefix is in.
        let mut empty = FrameCounter::default();
        empty.feed(&message(0));
        assert!(empty.first_message_whole() && !empty.more_than_one_message());
    }
}
