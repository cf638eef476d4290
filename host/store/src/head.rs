//! The head of a stored task record, and the repair of a write a crash cut short.
//!
//! [`SledStore`](crate::SledStore)'s task write changes up to three keys of three trees without a
//! sled transaction (a transaction or batch costs several times the inserts themselves): it
//! appends the events, then writes the record, then removes the queue entry it took. sled
//! recovers a prefix of the writes made before a crash (its log is replayed in order, up to the
//! first one lost), so a crash leaves one of:
//!
//! - events appended, record not written: the log holds events past the record's `log_end`.
//!   They are removed, and the input they answered is still queued: the turn runs again.
//! - record written, queue entry not removed: the record names the entry it `took`. It is
//!   removed, so the input is not taken twice.
//!
//! (A task's first write cut short leaves events that no record points to: the task does not
//! exist, and task ids are never reused, so nothing reads them.)
//!
//! - a record's part appended, record not written: the task has parts past the record's
//!   `parts`. They are removed with the events they came with.
//!
//! To tell, a record is stored behind a head: a tag byte (JSON never starts with it), the
//! number of the last event the record covers, the number of its parts (see
//! a task write), and the queue key the write took (empty for none).
//! Records written before heads existed are plain JSON and were written by transactions:
//! nothing to repair; records written before parts existed have the tag [`TAG_V1`] and no
//! parts.

/// The first byte of a record with a head that counts parts.
const TAG: u8 = 0x02;

/// The first byte of a head written before parts existed: no parts count.
const TAG_V1: u8 = 0x01;

/// Bytes before the key: tag, `log_end`, `parts`, key length.
const FIXED: usize = 1 + 8 + 8 + 2;

/// Bytes before the key in a [`TAG_V1`] head: tag, `log_end`, key length.
const FIXED_V1: usize = 1 + 8 + 2;

/// What a record's head says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head<'a> {
    /// The record covers the log up to this event.
    pub log_end: u64,
    /// The record has parts 1 to `parts`.
    pub parts: u64,
    /// The queue entry the write took, if any.
    pub took: Option<&'a [u8]>,
}

/// A head for a record covering the log up to `log_end`, with parts 1 to `parts`, and taking
/// `took`; the record's JSON follows it.
pub(crate) fn encode(log_end: u64, parts: u64, took: Option<&[u8]>) -> Vec<u8> {
    let took = took.unwrap_or_default();
    // Queue keys are a task id and 16 bytes; an id longer than 64 KiB is not taken anywhere.
    let len = u16::try_from(took.len()).unwrap_or(0);
    let took = &took[..usize::from(len)];
    let mut out = Vec::with_capacity(FIXED + took.len() + 1024);
    out.push(TAG);
    out.extend_from_slice(&log_end.to_be_bytes());
    out.extend_from_slice(&parts.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(took);
    out
}

/// Splits a stored record into its head (`None` for a record without one) and its JSON.
pub(crate) fn decode(stored: &[u8]) -> (Option<Head<'_>>, &[u8]) {
    let (with_parts, fixed) = match stored.first() {
        Some(&TAG) => (true, FIXED),
        Some(&TAG_V1) => (false, FIXED_V1),
        _ => return (None, stored),
    };
    if stored.len() < fixed {
        return (None, stored);
    }
    let u64_at = |at: usize| {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&stored[at..at + 8]);
        u64::from_be_bytes(buf)
    };
    let parts = if with_parts { u64_at(9) } else { 0 };
    let len = usize::from(u16::from_be_bytes([stored[fixed - 2], stored[fixed - 1]]));
    let Some(took) = stored.get(fixed..fixed + len) else {
        return (None, stored);
    };
    let head = Head {
        log_end: u64_at(1),
        parts,
        took: (!took.is_empty()).then_some(took),
    };
    (Some(head), &stored[fixed + len..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips_and_plain_json_has_none() {
        let mut stored = encode(42, 3, Some(b"t\0key"));
        stored.extend_from_slice(b"{\"a\":1}");
        let (head, json) = decode(&stored);
        assert_eq!(
            head,
            Some(Head {
                log_end: 42,
                parts: 3,
                took: Some(b"t\0key")
            })
        );
        assert_eq!(json, b"{\"a\":1}");

        let mut stored = encode(0, 0, None);
        stored.extend_from_slice(b"{}");
        assert_eq!(
            decode(&stored),
            (
                Some(Head {
                    log_end: 0,
                    parts: 0,
                    took: None
                }),
                &b"{}"[..]
            )
        );

        // A head written before parts existed.
        let mut v1 = vec![TAG_V1];
        v1.extend_from_slice(&7u64.to_be_bytes());
        v1.extend_from_slice(&2u16.to_be_bytes());
        v1.extend_from_slice(b"t\0{\"b\":2}");
        assert_eq!(
            decode(&v1),
            (
                Some(Head {
                    log_end: 7,
                    parts: 0,
                    took: Some(b"t\0")
                }),
                &b"{\"b\":2}"[..]
            )
        );

        assert_eq!(decode(b"{\"old\":true}"), (None, &b"{\"old\":true}"[..]));
        // Cut short: not a head.
        assert_eq!(decode(&[TAG, 0, 0]).0, None);
        assert_eq!(decode(&[TAG_V1, 0, 0]).0, None);
    }
}
