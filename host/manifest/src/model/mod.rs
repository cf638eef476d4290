//! Typed models of every manifest kind. Each struct is strict (`deny_unknown_fields`) and
//! generates its JSON Schema; the validator checks a document's shape against that schema before
//! deserializing it, so every problem is reported with its place.

pub mod agent;
pub mod bundle;
pub mod common;
pub mod host;
pub mod script;
pub mod tool;
pub mod trigger;

use schemars::Schema;

pub use agent::Agent;
pub use bundle::BundleDescriptor;
pub use host::HostConfig;
pub use script::Script;
pub use tool::Tool;
pub use trigger::{Schedule, Trigger};

/// The kinds of document the host loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `commonagents.info/v1beta2/agent`.
    Agent,
    /// `commonagents.info/v1beta2/tool`.
    Tool,
    /// `commonagents.info/v1beta2/trigger`.
    Trigger,
    /// `commonagents.info/v1/schedule`.
    Schedule,
    /// `commonagents.info/v1/bundledescription`.
    Bundle,
    /// `agentmesh/v1/host`.
    Host,
}

impl Kind {
    /// Every kind, in the order `validate` counts them.
    pub const ALL: [Kind; 6] = [
        Kind::Agent,
        Kind::Tool,
        Kind::Trigger,
        Kind::Schedule,
        Kind::Bundle,
        Kind::Host,
    ];

    /// The `kind:` string.
    pub fn api_name(self) -> &'static str {
        match self {
            Kind::Agent => "commonagents.info/v1beta2/agent",
            Kind::Tool => "commonagents.info/v1beta2/tool",
            Kind::Trigger => "commonagents.info/v1beta2/trigger",
            Kind::Schedule => "commonagents.info/v1/schedule",
            Kind::Bundle => "commonagents.info/v1/bundledescription",
            Kind::Host => "agentmesh/v1/host",
        }
    }

    /// The short name used by `agentmesh schema` and in messages.
    pub fn short_name(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Tool => "tool",
            Kind::Trigger => "trigger",
            Kind::Schedule => "schedule",
            Kind::Bundle => "bundle",
            Kind::Host => "host",
        }
    }

    /// The kind of a `kind:` string, or of a short name.
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.api_name() == text || k.short_name() == text)
    }

    /// The JSON Schema of the kind (draft 2020-12), with `kind` pinned to its value.
    pub fn schema(self) -> Schema {
        let mut schema = match self {
            Kind::Agent => schemars::schema_for!(Agent),
            Kind::Tool => schemars::schema_for!(Tool),
            Kind::Trigger => schemars::schema_for!(Trigger),
            Kind::Schedule => schemars::schema_for!(Schedule),
            Kind::Bundle => schemars::schema_for!(BundleDescriptor),
            Kind::Host => schemars::schema_for!(HostConfig),
        };
        if let Some(kind) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut("kind"))
            .and_then(|k| k.as_object_mut())
        {
            kind.insert("const".into(), self.api_name().into());
        }
        schema
    }
}
