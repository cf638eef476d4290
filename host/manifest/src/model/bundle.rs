//! `kind: commonagents.info/v1/bundledescription`: the optional first document of a bundle.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Describes the multi-document file it heads.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BundleDescriptor {
    /// `commonagents.info/v1/bundledescription`.
    pub kind: String,
    /// Display name.
    pub name: String,
    /// Markdown description.
    pub description: Option<String>,
    /// Who maintains it.
    pub author: Option<String>,
    /// Semantic version.
    pub version: Option<String>,
    /// Home page or repository.
    pub url: Option<String>,
    /// Tool `settings` keys to collect before import.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_settings: Vec<String>,
}
