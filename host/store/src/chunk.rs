//! One write's events as one stored value, on every backend: the JSON array of them, keyed by
//! the last one's number. Values written before chunks were one event each (its JSON object);
//! readers take both.

use agentmesh_model::event::Event;

use crate::Result;

/// The stored value of one write's `events`.
pub(crate) fn encode(events: &[Event]) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(events)?)
}

/// Adds the events of stored `value` with `seq` in `from..=to` to `out`; whether the value
/// reaches `to` (no later value holds any of them).
pub(crate) fn read_between(value: &[u8], from: u64, to: u64, out: &mut Vec<Event>) -> Result<bool> {
    let chunk: Vec<Event> = if value.first() == Some(&b'[') {
        serde_json::from_slice(value)?
    } else {
        vec![serde_json::from_slice(value)?]
    };
    let past = chunk.last().is_some_and(|e| e.seq >= to);
    out.extend(chunk.into_iter().filter(|e| (from..=to).contains(&e.seq)));
    Ok(past)
}
