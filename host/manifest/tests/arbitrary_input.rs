//! No input makes validation panic or hang: arbitrary text as YAML, YAML-shaped noise, and
//! arbitrary CEL and template text inside otherwise valid manifests.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use agentmesh_expr::{Expression, Template};
use proptest::prelude::*;

/// Loads and checks one file's text, as `validate` does for each file of a config dir.
fn validate_text(text: &str) -> Vec<String> {
    agentmesh_manifest::validate_text(text, Path::new("fuzz.yaml"), &|_| None)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A valid tool and agent with `expr` in every expression field and `template` in every
/// template field.
fn manifest_with(expr: &str, template: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: f
name: t
description: d
parameters:
  type: object
  properties:
    owner: {{type: string}}
actions:
  - name: a
    description: d
    execute:
      cel: {{expression: {e}}}
events:
  - name: ev
    message: {t}
    receive:
      webhook: {{filter: {e}, secret: {t}}}
---
kind: commonagents.info/v1beta2/agent
namespace: f
name: ag
description: d
prompt: {t}
capabilities:
  t:
    bindings: {{owner: {e}}}
    before:
      - assert: {e}
        error_message: {t}
    after:
      - transform: {e}
guardrails:
  after:
    - assert: {e}
exposes:
  x: {e}
",
        e = q(expr),
        t = q(template)
    )
}

/// Text built from the characters that steer a YAML parser.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just("- ".to_owned()),
        Just(": ".to_owned()),
        Just("kind: commonagents.info/v1beta2/agent\n".to_owned()),
        Just("---\n".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just(", ".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("|\n".to_owned()),
        Just(">-\n".to_owned()),
        Just("'".to_owned()),
        Just("\"".to_owned()),
        Just("!!str ".to_owned()),
        Just("? ".to_owned()),
        Just("<<: ".to_owned()),
        "[a-z_]{1,8}",
        "[0-9.eE+-]{1,6}",
    ];
    prop::collection::vec(token, 0..80).prop_map(|v| v.concat())
}

/// Text built from CEL's tokens.
fn celish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("context".to_owned()),
        Just("event".to_owned()),
        Just("has(".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just(".".to_owned()),
        Just(".?".to_owned()),
        Just(",".to_owned()),
        Just(" && ".to_owned()),
        Just(" || ".to_owned()),
        Just(" ? ".to_owned()),
        Just(" : ".to_owned()),
        Just("!".to_owned()),
        Just(" == ".to_owned()),
        Just("'".to_owned()),
        Just("\"\"\"".to_owned()),
        Just("\\".to_owned()),
        Just("//".to_owned()),
        Just(".all(x, ".to_owned()),
        Just(".map(".to_owned()),
        Just(".put(".to_owned()),
        Just("review(".to_owned()),
        "[a-z]{1,5}",
        "[0-9]{1,4}u?",
    ];
    prop::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        validate_text(&text);
    }

    #[test]
    fn yaml_shaped_noise_never_panics(text in yamlish()) {
        validate_text(&text);
    }

    #[test]
    fn arbitrary_cel_in_every_expression_field_never_panics(expr in celish(), template in "\\PC{0,60}") {
        validate_text(&manifest_with(&expr, &template));
    }

    #[test]
    fn arbitrary_unicode_cel_never_panics(expr in "\\PC{0,200}") {
        let _ = Expression::compile(&expr);
        let _ = Template::parse(&expr);
        validate_text(&manifest_with(&expr, &format!("x {{{expr}}} y")));
    }
}

#[test]
fn deeply_nested_yaml_is_refused_not_a_stack_overflow() {
    // Past the parser's own limit.
    let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let diags = validate_text(&text);
    assert!(
        diags.iter().any(|d| d.contains("recursion limit")),
        "{diags:?}"
    );
    // Within the parser's limit, past the loader's.
    let text = format!(
        "kind: agentmesh/v1/host\nx: {}{}",
        "[".repeat(100),
        "]".repeat(100)
    );
    let diags = validate_text(&text);
    assert!(
        diags.iter().any(|d| d.contains("nesting deeper than 64")),
        "{diags:?}"
    );
}

#[test]
fn alias_bombs_are_refused() {
    let mut text = String::from("kind: agentmesh/v1/host\na: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..12 {
        let prev = if i == 0 {
            "a".to_owned()
        } else {
            format!("a{}", i - 1)
        };
        text.push_str(&format!("b{i}: &a{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    let diags = validate_text(&text);
    assert!(
        diags.iter().any(|d| d.contains("expands to more than")),
        "{diags:?}"
    );
}

#[test]
fn valid_manifest_template_is_valid() {
    // The property above is only meaningful if the surrounding manifest is itself valid.
    assert_eq!(
        validate_text(&manifest_with("true", "ok")),
        Vec::<String>::new()
    );
}
