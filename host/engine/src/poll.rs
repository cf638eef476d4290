//! Polled tool events (`receive.poll`): one poll of an event's endpoint for one set of values
//! of the parameters its request reads (a [`PollKey`]), and what the host keeps of it between
//! polls. The poller that decides when to poll, and routes what a poll found as a webhook's
//! events are routed, is `agentmesh-routing`'s.
//!
//! A poll makes the request with `parameters` (the key's values), `settings`, `auth`,
//! `runtime` and `poll` (`last_fetched_at`, RFC 3339; `cursor`) in scope, reads the answer's
//! JSON body as `response`, and evaluates `detect` to the list of items. An item is new when
//! its id (`id` over `item`; else `item.id`; else the whole item) was not seen by an earlier
//! poll of the key. The first poll of a key only records what is there: the items already
//! present when a task subscribed are not events. Each new item carries a delivery id made
//! from the key and its id, so that the door takes it once even when a crash came between its
//! delivery and [`Engine::polled`].

use std::collections::{HashSet, VecDeque};

use agentmesh_expr::Activation;
use agentmesh_store::now_rfc3339;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::outcome::ActionResult;
use crate::plan::PollPlan;
use crate::runtime::{HttpAnswer, http_send, snippet};
use crate::{Engine, EngineError, Result};

/// The store namespace of what pollers keep.
const STATE: &str = "poll";

/// How many item ids a key remembers: the oldest are forgotten first.
const SEEN: usize = 10_000;

/// One poller: event `event` of tool `tool`, for these values of the parameters its request
/// reads (in the order the plan lists them; stored allow-list text, see
/// `agentmesh_model::allow_list::allow_value`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PollKey {
    /// `namespace/name`.
    pub tool: String,
    /// The event's name.
    pub event: String,
    /// Parameter name → value.
    pub values: Vec<(String, String)>,
}

impl PollKey {
    /// What it is known by in the store and in logs.
    pub fn id(&self) -> String {
        let values: Map<String, Value> = self
            .values
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        format!("{} {} {}", self.tool, self.event, Value::Object(values))
    }

    /// The delivery id of its item `item` (see `item_id`): `poll-` and a digest of both ids.
    /// The door keeps polled items apart from the tool's webhook deliveries
    /// ([`Entrance::Poll`](crate::Entrance::Poll)): a webhook's sender, who may compute
    /// this id, cannot spend it ahead of the item.
    pub fn delivery_id(&self, item: &str) -> String {
        let mut digest = Sha256::new();
        digest.update(self.id().as_bytes());
        digest.update([0]);
        digest.update(item.as_bytes());
        format!("poll-{}", hex::encode(&digest.finalize()[..16]))
    }

    /// The `parameters` variable of its request: each value as the JSON it was stored from
    /// (a string as itself).
    fn parameters(&self) -> Value {
        let values = self.values.iter().map(|(k, v)| {
            let value = serde_json::from_str::<Value>(v)
                .ok()
                .filter(|v| !v.is_string())
                .unwrap_or_else(|| Value::String(v.clone()));
            (k.clone(), value)
        });
        Value::Object(values.collect())
    }
}

/// What a key keeps between polls.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PollState {
    /// When the last poll that succeeded was made (RFC 3339).
    last_fetched_at: String,
    /// The `cursor` it gave.
    cursor: Value,
    /// The ids of items seen, oldest first.
    seen: VecDeque<String>,
}

/// Why a poll found nothing.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The endpoint failed or its answer is not what the event says (unreachable, a failing
    /// status, `detect` that fails or gives no list): the poller backs off.
    #[error("{0}")]
    Failed(String),
    /// The host failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A new item a poll found.
#[derive(Debug, Clone)]
pub struct PolledItem {
    /// Its id (`id`).
    pub id: String,
    /// The event's payload: the item.
    pub payload: Value,
    /// The delivery id it arrives with: the same for the same key and id.
    pub delivery_id: String,
}

/// What a poll found, and what the key keeps once its items are delivered
/// ([`Engine::polled`]).
pub struct Polled {
    /// The new items, in the order `detect` listed them.
    pub items: Vec<PolledItem>,
    next: PollState,
}

impl Engine {
    /// Polls `plan` (event `key.event` of tool `key.tool`) for `key`'s values: the items not
    /// seen before (see the module docs). `Err` says why the poll failed (the endpoint, its
    /// answer, `detect`, the store); the key keeps what it had.
    pub async fn poll(&self, plan: &PollPlan, key: &PollKey) -> Result<Polled, PollError> {
        let tool = self
            .plan()
            .tools
            .get(&key.tool)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("tool `{}`", key.tool)))?;
        let stored = self.poll_state(key)?;
        let started = now_rfc3339();
        let first = stored.is_none();
        let state = stored.unwrap_or_default();
        let poll = json!({
            "last_fetched_at": if first { &started } else { &state.last_fetched_at },
            "cursor": state.cursor,
        });
        let parameters = key.parameters();
        let mut act = Activation::new();
        act.set("parameters", parameters.clone())
            .set("settings", Value::Object(tool.settings.clone()))
            .set("poll", poll.clone())
            .bind("runtime", self.runtime_variable());
        let failed = PollError::Failed;
        let HttpAnswer { status, body, .. } =
            http_send(self, &plan.request, &act)
                .await
                .map_err(|e| match e {
                    ActionResult::Recoverable(why) | ActionResult::Fatal(why) => failed(why),
                    ActionResult::Ok(_) => failed("no answer".into()),
                })?;
        let mut next = PollState {
            last_fetched_at: started,
            ..state
        };
        if status == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(Polled {
                items: Vec::new(),
                next,
            });
        }
        if !status.is_success() {
            return Err(failed(format!(
                "HTTP {}: {}",
                status.as_u16(),
                snippet(&self.secrets(), &body)
            )));
        }
        let mut act = Activation::new();
        act.set("response", body)
            .set("poll", poll)
            .set("parameters", parameters);
        let detected = plan
            .detect
            .evaluate(&act)
            .map_err(|e| failed(format!("`detect`: {}", e.message)))?;
        let Value::Array(detected) = detected else {
            return Err(failed(format!(
                "`detect` gave {}, not a list of items",
                snippet(&self.secrets(), &detected)
            )));
        };
        if let Some(cursor) = &plan.cursor {
            next.cursor = cursor
                .evaluate(&act)
                .map_err(|e| failed(format!("`cursor`: {}", e.message)))?;
        }
        let seen: HashSet<&String> = next.seen.iter().collect();
        let mut items = Vec::new();
        let mut ids = Vec::new();
        let mut taken = HashSet::new();
        for item in detected {
            let id = item_id(plan, &item).map_err(failed)?;
            if seen.contains(&id) || !taken.insert(id.clone()) {
                continue;
            }
            if !first {
                items.push(PolledItem {
                    delivery_id: key.delivery_id(&id),
                    id: id.clone(),
                    payload: item,
                });
            }
            ids.push(id);
        }
        next.seen.extend(ids);
        while next.seen.len() > SEEN {
            next.seen.pop_front();
        }
        Ok(Polled { items, next })
    }

    /// Records, durably, that `polled`'s items were delivered: the next poll of `key` takes
    /// them as seen and reads its `cursor` and `last_fetched_at`.
    pub fn polled(&self, key: &PollKey, polled: &Polled) -> Result<()> {
        let bytes = serde_json::to_vec(&polled.next)
            .map_err(|e| EngineError::Internal(format!("encoding a poll's state: {e}")))?;
        self.store().put_state_buffered(STATE, &key.id(), &bytes)?;
        self.flush()?;
        Ok(())
    }

    /// What `key` kept, `None` before its first poll.
    fn poll_state(&self, key: &PollKey) -> Result<Option<PollState>> {
        let Some(bytes) = self.store().state_value(STATE, &key.id())? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            EngineError::Internal(format!("the stored state of poll `{}`: {e}", key.id()))
        })
    }
}

/// The id of `item`: `id` over it, else its `id` field, else the whole item; a string as
/// itself, anything else as its JSON.
fn item_id(plan: &PollPlan, item: &Value) -> std::result::Result<String, String> {
    let id = match &plan.id {
        Some(id) => {
            let mut act = Activation::new();
            act.set("item", item.clone());
            id.evaluate(&act)
                .map_err(|e| format!("`id`: {}", e.message))?
        }
        None => item.get("id").unwrap_or(item).clone(),
    };
    Ok(match id {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plan(id: Option<&str>) -> PollPlan {
        let poll: agentmesh_manifest::model::tool::Poll = serde_json::from_value(json!({
            "url": "http://feed/{parameters.repo}?n={parameters.n}",
            "detect": "response.items",
            "id": id,
        }))
        .unwrap();
        crate::plan::poll::poll_plan(&poll, "item", &Default::default()).unwrap()
    }

    fn key() -> PollKey {
        PollKey {
            tool: "t/feed".into(),
            event: "item".into(),
            values: vec![("repo".into(), "alpha".into()), ("n".into(), "42".into())],
        }
    }

    #[test]
    fn a_key_reads_the_parameters_its_request_reads_as_the_json_they_were() {
        assert_eq!(plan(None).parameters, ["repo", "n"]);
        assert_eq!(key().parameters(), json!({"repo": "alpha", "n": 42}));
    }

    #[test]
    fn an_item_is_known_by_its_id_expression_its_id_field_or_itself() {
        let item = json!({"id": 7, "seq": 3, "title": "t"});
        assert_eq!(item_id(&plan(None), &item).unwrap(), "7");
        assert_eq!(item_id(&plan(Some("item.title")), &item).unwrap(), "t");
        let bare = json!(["a", 1]);
        assert_eq!(item_id(&plan(None), &bare).unwrap(), r#"["a",1]"#);
        assert!(item_id(&plan(Some("item.missing")), &item).is_err());
    }

    #[test]
    fn delivery_ids_are_the_same_for_the_same_key_and_item_only() {
        let id = key().delivery_id("7");
        assert_eq!(id, key().delivery_id("7"));
        assert!(id.starts_with("poll-") && id.len() == 5 + 32, "{id}");
        assert_ne!(id, key().delivery_id("8"));
        let other = PollKey {
            values: vec![("repo".into(), "beta".into()), ("n".into(), "42".into())],
            ..key()
        };
        assert_ne!(id, other.delivery_id("7"));
    }
}
