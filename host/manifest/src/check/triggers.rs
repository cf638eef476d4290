//! Triggers and schedules: their agent, source, inputs, cron, time zone and message.

use std::str::FromStr;

use indexmap::IndexMap;
use serde_json::Value;

use super::steps::{self, Around, Layer};
use super::{Checker, K, key_pos, pos_at, scopes};
use crate::load::{Loaded, Source};
use crate::model::agent::Agent;
use crate::model::common::ParseError;
use crate::model::{Schedule, Trigger};
use crate::suggest::{did_you_mean, did_you_mean_hint};

pub(crate) fn check_trigger(c: &mut Checker, doc: &Loaded<Trigger>) {
    let t = &doc.value;
    let src = &doc.source;
    let agent = find_agent(c, src, &t.namespace, &t.agent);
    let sources = c.config.host_config().sources;
    if !sources.contains_key(&t.source.source_type) {
        let names: Vec<&str> = sources.keys().map(String::as_str).collect();
        let hint = did_you_mean(&t.source.source_type, names.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_else(|| match names.is_empty() {
                true => " (the host config configures no sources)".into(),
                false => format!(" (configured: {})", names.join(", ")),
            });
        c.error(
            src,
            pos_at(&src.node, &[K("source"), K("type")]),
            format!(
                "source type `{}` is not configured in the host config's `sources`{hint}",
                t.source.source_type
            ),
        );
    }
    if let Some(before) = &t.source.before {
        let around = Around {
            namespace: &t.namespace,
            tool: None,
            delegate: None,
        };
        steps::check(
            c,
            src,
            &[K("source"), K("before")],
            before,
            Layer::TriggerBefore,
            &around,
        );
    }
    c.template(src, &[K("message")], &scopes::TRIGGER_MESSAGE);
    if let Some(agent) = agent {
        check_inputs(c, src, agent, t.inputs.as_ref(), t.message.is_some());
    }
}

pub(crate) fn check_schedule(c: &mut Checker, doc: &Loaded<Schedule>) {
    let s = &doc.value;
    let src = &doc.source;
    let agent = find_agent(c, src, &s.namespace, &s.agent);
    let when: Vec<&str> = [
        ("cron", s.cron.is_some()),
        ("interval", s.interval.is_some()),
        ("at", s.at.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, set)| set.then_some(n))
    .collect();
    match when.as_slice() {
        [_] => {}
        [] => c.error(
            src,
            src.node.pos,
            "a schedule needs exactly one of `cron`, `interval`, `at`; it has none",
        ),
        several => c.error(
            src,
            key_pos(&src.node, &[K(several[1])]),
            format!(
                "a schedule needs exactly one of `cron`, `interval`, `at`; it has {}",
                several.join(" and ")
            ),
        ),
    }
    if let Some(cron) = &s.cron
        && let Err(e) = parse_cron(cron)
    {
        c.error(
            src,
            pos_at(&src.node, &[K("cron")]),
            format!("bad cron `{cron}`: {e}"),
        );
    }
    if let Some(tz) = &s.timezone
        && chrono_tz::Tz::from_str(tz).is_err()
    {
        let names = chrono_tz::TZ_VARIANTS.iter().map(|t| t.name());
        let hint = did_you_mean_hint(tz, names);
        c.error(
            src,
            pos_at(&src.node, &[K("timezone")]),
            format!("unknown time zone `{tz}` (use an IANA name such as `Europe/Berlin`){hint}"),
        );
    }
    if let Some(at) = &s.at
        && chrono::DateTime::parse_from_rfc3339(at).is_err()
    {
        c.error(
            src,
            pos_at(&src.node, &[K("at")]),
            format!("`at` must be an RFC 3339 time such as 2026-06-01T12:00:00Z, found `{at}`"),
        );
    }
    let Some(agent) = agent else { return };
    let has_message = s.inputs.as_ref().is_some_and(|i| i.contains_key("message"));
    let default_message = agent
        .parameters
        .as_ref()
        .and_then(|p| p.properties.get("message"))
        .is_some_and(|m| m.default.is_some());
    if !has_message && !default_message {
        let pos = s
            .inputs
            .as_ref()
            .map_or(src.node.pos, |_| key_pos(&src.node, &[K("inputs")]));
        c.error(
            src,
            pos,
            format!(
                "schedule `{}` has no message: set `inputs.message`, or give agent `{}`'s `message` parameter a default",
                s.name, s.agent
            ),
        );
    }
    check_inputs(c, src, agent, s.inputs.as_ref(), true);
}

/// Parses a five-field cron expression.
pub fn parse_cron(text: &str) -> Result<croner::Cron, ParseError> {
    let fields = text.split_whitespace().count();
    if fields != 5 {
        return Err(ParseError(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {fields}"
        )));
    }
    croner::Cron::from_str(text).map_err(|e| ParseError(e.to_string()))
}

fn find_agent<'a>(
    c: &mut Checker<'a>,
    src: &Source,
    namespace: &str,
    name: &str,
) -> Option<&'a Agent> {
    let config = c.config;
    if let Some(a) = config.agent(namespace, name) {
        return Some(&a.value);
    }
    let names = config
        .agents
        .iter()
        .filter(|a| a.value.namespace == namespace)
        .map(|a| a.value.name.as_str());
    let hint = did_you_mean_hint(name, names);
    c.error(
        src,
        pos_at(&src.node, &[K("agent")]),
        format!("agent `{namespace}/{name}` does not exist{hint}"),
    );
    None
}

/// `inputs` name only the agent's parameters (and `message`), and give every required one.
fn check_inputs(
    c: &mut Checker,
    src: &Source,
    agent: &Agent,
    inputs: Option<&IndexMap<String, Value>>,
    message_given: bool,
) {
    let params = agent.parameters.as_ref();
    if let Some(inputs) = inputs {
        for (key, value) in inputs {
            let pos = key_pos(&src.node, &[K("inputs"), K(key)]);
            if key == "message" {
                if !is_message(value) {
                    c.error(
                        src,
                        pos_at(&src.node, &[K("inputs"), K("message")]),
                        "`message` must be a string or a list of content parts `{mimeType, text}`",
                    );
                }
            } else if !params.is_some_and(|p| p.has(key)) {
                c.error(
                    src,
                    pos,
                    format!(
                        "input `{key}` is not a parameter of agent `{}/{}`",
                        agent.namespace, agent.name
                    ),
                );
            }
        }
    }
    let _ = message_given;
    for (name, prop) in params.iter().flat_map(|p| p.properties.iter()) {
        if name == "message" || prop.default.is_some() {
            continue;
        }
        if !inputs.is_some_and(|i| i.contains_key(name)) {
            let pos = inputs.map_or(src.node.pos, |_| key_pos(&src.node, &[K("inputs")]));
            c.error(
                src,
                pos,
                format!(
                    "agent `{}/{}` requires the parameter `{name}`; set `inputs.{name}`",
                    agent.namespace, agent.name
                ),
            );
        }
    }
}

fn is_message(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(parts) => parts.iter().all(|p| {
            p.get("mimeType").is_some_and(Value::is_string)
                && p.as_object().is_some_and(|o| {
                    o.contains_key("text") || o.contains_key("data") || o.contains_key("uri")
                })
        }),
        _ => false,
    }
}
