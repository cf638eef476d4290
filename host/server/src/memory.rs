//! The memory that request bodies take while they are handled, bounded across all requests
//! (`policy.max_body_memory`).
//!
//! `max_body_bytes` bounds one body, `max_connections` how many are read at once: together
//! 1024 × 25 MiB, more memory than most hosts have, and reachable without a token (a webhook's
//! signature can only be checked once its whole body is read; a tool event without a secret
//! needs none). A body's JSON takes more than its bytes: a `serde_json::Value` is 72 bytes
//! here (objects keep their order), so `[0,0,0,…]` parses into dozens of times its size,
//! and a 25 MiB body into gigabytes. So every body is charged, as it arrives, its bytes and
//! then the most its JSON can take once parsed and read by expressions ([`json_cost`], worked
//! out from the bytes without parsing them; routing shares the one tree among every filter,
//! step and message that reads the event); the charge is released when the last reference to
//! the bytes is dropped, after the request's handler is done with them. A body that does not
//! fit beside the others being handled is answered 503 `busy`; one that could never fit, 413
//! `too_large`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;

/// What one more element of a JSON array can take: its 72-byte `Value` in the array's `Vec`,
/// three times over (growing a `Vec` from n to 2n slots allocates the new block and copies
/// into it before the old one is freed). Once read by an expression, an element is also
/// boxed as a CEL value beside the `Vec` it came from, which takes less. The first element of
/// an array takes a `Vec` of four (a `Vec`'s smallest non-zero capacity for elements of this
/// size), with its CEL box.
const ELEMENT: usize = 224;
const FIRST_ELEMENT: usize = 352;
/// What one more entry of a JSON object can take: the 104-byte entry (hash, key, value) in a
/// `Vec`, three times over as an element is, its slot in the index table and the key's
/// allocation header room (the key's text is counted with the body's bytes); once read, its
/// slot in a CEL map. The first entry takes room for four, and the table's smallest
/// allocation.
const ENTRY: usize = 320;
const FIRST_ENTRY: usize = 576;
/// What an array or object takes besides its elements once an expression reads the value
/// holding it: the wrapper that converts it to CEL values on first use (an `Arc` of its JSON
/// and the CEL container it becomes) and the boxes that point to it.
const CONTAINER: usize = 176;
/// How deep `serde_json` nests before it refuses the document (its recursion limit): nothing
/// deeper is ever built.
const DEPTH: usize = 128;

/// The most memory the JSON of `body` can take once parsed and read by expressions (if it is
/// JSON at all): its bytes (a string never takes more than its text), and for each container,
/// element and entry the bytes above, told apart by the structure outside strings (`[`, `{`,
/// `,`), without parsing. A body that is not JSON fails to parse at its first bad byte, having
/// built no more than its valid beginning, which the same count covers.
/// `json_cost_bounds_what_parsing_and_reading_take` checks it against what parsing and reading
/// allocate for the worst bodies.
pub(crate) fn json_cost(body: &[u8]) -> usize {
    let mut cost = body.len();
    // The containers open at this point: `[` or `{`.
    let mut open: Vec<u8> = Vec::new();
    // Just after a `[` or `{`: whether it is empty shows at the next byte that is not space.
    let mut just_opened = false;
    let (mut in_string, mut escaped) = (false, false);
    for &byte in body {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if just_opened && !byte.is_ascii_whitespace() {
            just_opened = false;
            cost = cost.saturating_add(match (open.last(), byte) {
                (Some(b'['), b']') | (Some(b'{'), b'}') => 0,
                (Some(b'['), _) => FIRST_ELEMENT,
                _ => FIRST_ENTRY,
            });
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' if open.len() > DEPTH => break,
            b'[' | b'{' => {
                open.push(byte);
                just_opened = true;
                cost = cost.saturating_add(CONTAINER);
            }
            b']' | b'}' => {
                open.pop();
            }
            b',' if open.last() == Some(&b'{') => cost = cost.saturating_add(ENTRY),
            b',' => cost = cost.saturating_add(ELEMENT),
            _ => {}
        }
    }
    cost
}

/// The capacity to give a body's buffer of `capacity` bytes that must hold `needed`: twice
/// what it had (so that a body sent in many small pieces is copied a few times, not once per
/// piece), at most `limit`, and no more than `announced` when the body said it has that many
/// bytes (`Content-Length`; 0 when it did not).
pub(crate) fn room_for(capacity: usize, needed: usize, announced: usize, limit: usize) -> usize {
    let doubled = needed.max(2 * capacity).min(limit);
    match announced >= needed {
        true => doubled.min(announced),
        false => doubled,
    }
}

/// The bound on what bodies being handled may take at once (reloadable), and what they take.
#[derive(Debug)]
pub(crate) struct BodyMemory {
    limit: AtomicUsize,
    used: AtomicUsize,
}

/// Why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Others take the room now; it may fit later.
    Busy,
    /// More than the whole bound: it never fits.
    TooLarge,
}

impl BodyMemory {
    /// A bound of `limit` bytes, none of it taken.
    pub(crate) fn new(limit: usize) -> Arc<BodyMemory> {
        Arc::new(BodyMemory {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        })
    }

    /// The bound in force.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Its two gauges for `/metrics`: what the bodies being handled take, and the bound.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let gauges = [
            (
                "agentmesh_body_memory_bytes",
                "Memory charged to the request bodies being handled, their parsed JSON included.",
                self.used.load(Ordering::Acquire),
            ),
            (
                "agentmesh_body_memory_limit_bytes",
                "The most they may take together (policy.max_body_memory).",
                self.limit(),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
    }

    /// Puts a reloaded bound in force; what is taken stays taken.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// A charge of nothing yet, released when dropped.
    pub(crate) fn charge(self: &Arc<BodyMemory>) -> Charge {
        Charge {
            memory: Arc::clone(self),
            bytes: 0,
        }
    }

    fn take(&self, held: usize, more: usize) -> Result<(), Refused> {
        let limit = self.limit();
        if held.saturating_add(more) > limit {
            return Err(Refused::TooLarge);
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|&total| total <= limit)
            })
            .map(drop)
            .map_err(|_| Refused::Busy)
    }
}

/// The memory one body holds against its [`BodyMemory`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    memory: Arc<BodyMemory>,
    bytes: usize,
}

impl Charge {
    /// Takes `more` bytes besides what the charge holds.
    pub(crate) fn grow(&mut self, more: usize) -> Result<(), Refused> {
        self.memory.take(self.bytes, more)?;
        self.bytes += more;
        Ok(())
    }

    /// `body` holding this charge until the last of its clones is dropped.
    pub(crate) fn attach(self, body: Bytes) -> Bytes {
        Bytes::from_owner(Charged {
            body,
            _charge: self,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A body and its charge.
struct Charged {
    body: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

#[cfg(test)]
// The counting allocator below is the one `unsafe` of this crate: it wraps `System` to see
// what parsing allocates.
#[allow(clippy::unwrap_used, clippy::panic, unsafe_code)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::*;

    /// Counts what this thread has allocated and not freed, and the most at any time.
    struct Counting;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn add(bytes: isize) {
        // `try_with`: allocations during the thread's teardown are not counted.
        let _ = LIVE.try_with(|live| {
            live.set(live.get() + bytes);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
    }

    // SAFETY: every call is passed on to `System` unchanged; only counters are kept beside.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            // SAFETY: as the caller promised for `layout`.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            // SAFETY: as the caller promised for `ptr` and `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }

        /// Counted as the host's allocator may do it: a new block, the old one copied into it
        /// and freed, both held at once.
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size as isize);
            // SAFETY: as the caller promised for `ptr`, `layout` and `new_size`.
            let moved = unsafe { System.realloc(ptr, layout, new_size) };
            add(-(layout.size() as isize));
            moved
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// The most this thread had allocated at once, beyond what it had before, while parsing
    /// `body` and then while CEL expressions read all of it (routing binds a delivery's JSON
    /// as the variable `event`; each level an expression reads is converted to CEL values).
    fn reading_peak(body: &[u8]) -> usize {
        let before = LIVE.with(Cell::get);
        PEAK.with(|peak| peak.set(before));
        let parsed: serde_json::Value = serde_json::from_slice(body).unwrap();
        let bound = agentmesh_expr::Bound::new(parsed);
        let mut act = agentmesh_expr::Activation::new();
        act.bind("v", bound);
        // Comparing the value with itself reads every level of it.
        let all = agentmesh_expr::Expression::compile("v == v").unwrap();
        assert!(all.evaluate_bool(&act).unwrap());
        let peak = PEAK.with(Cell::get);
        drop(act);
        usize::try_from(peak - before).unwrap()
    }

    fn repeated(open: &str, item: &str, close: &str, n: usize) -> Vec<u8> {
        let mut body = open.to_owned();
        for i in 0..n {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&item.replace('#', &i.to_string()));
        }
        body.push_str(close);
        body.into_bytes()
    }

    #[test]
    fn json_cost_bounds_what_parsing_and_reading_take() {
        // Just past a power of two: the arrays' `Vec`s have just grown, their old blocks and
        // their new ones held at once.
        let n = 32_769;
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/github/pull_request.opened.json"
        );
        let github = std::fs::read(fixture).unwrap_or_else(|e| {
            panic!("{fixture}: {e} (the shared fixtures sit beside the repository)")
        });
        let bodies = [
            ("numbers", repeated("[", "0", "]", n)),
            ("empty arrays", repeated("[", "[]", "]", n)),
            ("empty objects", repeated("[", "{}", "]", n)),
            ("short strings", repeated("[", "\"a\"", "]", n)),
            ("nested arrays", repeated("[", "[0]", "]", n)),
            ("an object's entries", repeated("{", "\"#\":0", "}", n)),
            ("objects of one entry", repeated("[", "{\"a\":0}", "]", n)),
            (
                "deep",
                format!("{}{}", "[".repeat(120), "]".repeat(120)).into_bytes(),
            ),
            ("a GitHub delivery", github),
        ];
        for (what, body) in &bodies {
            let taken = reading_peak(body);
            let cost = json_cost(body);
            assert!(
                taken <= cost,
                "{what}: parsing took {taken} bytes, more than json_cost's {cost}"
            );
            // Not so loose that ordinary bodies cannot fit: within 3× of the real figure.
            assert!(
                cost <= 3 * taken.max(body.len()),
                "{what}: json_cost's {cost} is far above the {taken} parsing took"
            );
        }
    }

    /// The capacities a buffer goes through while `total` bytes arrive in pieces of `piece`.
    fn growth(total: usize, piece: usize, announced: usize) -> Vec<usize> {
        let (mut capacity, mut len, mut steps) = (0, 0, Vec::new());
        while len < total {
            let needed = (len + piece).min(total);
            if needed > capacity {
                capacity = room_for(capacity, needed, announced, 25 << 20);
                steps.push(capacity);
            }
            len = needed;
        }
        steps
    }

    #[test]
    fn a_buffer_grows_by_doubling_and_no_further_than_the_body_said() {
        // 25 MiB in 8 KiB pieces: 3,200 pieces, a dozen allocations (and copies), not 3,200.
        let unannounced = growth(25 << 20, 8 << 10, 0);
        assert!(unannounced.len() <= 13, "{unannounced:?}");
        assert_eq!(unannounced.last(), Some(&(25 << 20)));
        // A body that said its length is never given more room than that.
        let announced = growth(100_000, 8 << 10, 100_000);
        assert!(announced.len() <= 5, "{announced:?}");
        assert!(announced.iter().all(|&c| c <= 100_000), "{announced:?}");
        assert_eq!(announced.last(), Some(&100_000));
    }

    #[test]
    fn json_cost_ignores_what_strings_hold() {
        assert_eq!(json_cost(br#""[,:{""#), 6);
        assert_eq!(
            json_cost(br#"["\"[,", 1]"#),
            11 + CONTAINER + FIRST_ELEMENT + ELEMENT
        );
        assert_eq!(
            json_cost(br#"{"a": [ ], "b": {}}"#),
            19 + 3 * CONTAINER + FIRST_ENTRY + ENTRY
        );
    }

    #[test]
    fn charges_are_bounded_together_and_given_back_when_the_body_is_dropped() {
        let memory = BodyMemory::new(1000);
        let mut first = memory.charge();
        first.grow(600).unwrap();
        let mut second = memory.charge();
        assert_eq!(second.grow(500), Err(Refused::Busy));
        assert_eq!(second.grow(1001), Err(Refused::TooLarge));
        second.grow(400).unwrap();
        assert_eq!(second.grow(1), Err(Refused::Busy));
        let body = first.attach(Bytes::from_static(b"body"));
        let clone = body.clone();
        drop(body);
        assert_eq!(second.grow(1), Err(Refused::Busy), "a clone still holds it");
        drop(clone);
        second.grow(600).unwrap();
        assert_eq!(second.grow(1), Err(Refused::TooLarge));
        drop(second);
        memory.charge().grow(1000).unwrap();
    }
}
