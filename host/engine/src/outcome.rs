//! How an action ended, whichever backend ran it.

use serde_json::Value;

/// How an action ended.
pub(crate) enum ActionResult {
    /// The result.
    Ok(Value),
    /// A tool-level failure: told to the LLM, the task goes on.
    Recoverable(String),
    /// A component's `fatal`, invalid configuration or a failure of the host itself: the task
    /// terminates. A remote endpoint's failure is never fatal (CONTRACT §5).
    Fatal(String),
}
