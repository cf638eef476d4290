//! The variables each place in a manifest may read (the spec's scope tables, CONTRACT §5).

use agentmesh_expr::Scope;

/// A list of root variables, written as the names they are: `roots![event now]`.
macro_rules! roots {
    ($($root:ident)*) => { &[$(stringify!($root)),*] };
}

const fn scope(place: &'static str, roots: &'static [&'static str], review: bool) -> Scope {
    Scope {
        place,
        roots,
        review,
    }
}

/// Capability `before` and `before_first` steps (`event` is null outside event activations).
pub const MIDDLEWARE_BEFORE: Scope = scope(
    "a middleware `before` step",
    roots![context c input i now event],
    true,
);
/// Capability `after` steps.
pub const MIDDLEWARE_AFTER: Scope = scope(
    "a middleware `after` step",
    roots![context c input i output o now event],
    true,
);
/// Guardrail `before` steps.
pub const GUARDRAIL_BEFORE: Scope = scope(
    "a guardrail `before` step",
    roots![context c input i now],
    false,
);
/// Guardrail `after` steps.
pub const GUARDRAIL_AFTER: Scope = scope(
    "a guardrail `after` step",
    roots![context c output o now],
    false,
);
/// Capability bindings.
pub const BINDING: Scope = scope("a binding", roots![context c runtime now], false);
/// The agent prompt.
pub const PROMPT: Scope = scope("the prompt", roots![context c runtime now], false);
/// Agent `exposes`.
pub const EXPOSES: Scope = scope(
    "`exposes`",
    roots![context c input i output o now runtime],
    false,
);
/// A `cel` action's expression.
pub const CEL_TOOL: Scope = scope(
    "a `cel` expression",
    roots![context c input i now runtime mount],
    true,
);
/// A tool event's `message`.
pub const EVENT_MESSAGE: Scope = scope("an event `message`", roots![event], false);
/// A `receive.*.filter`.
pub const FILTER: Scope = scope("an event filter", roots![event parameters], false);
/// An `mcp` block's `url`, `env` values and `headers`.
pub const MCP: Scope = scope("an `mcp` url, env value or header", roots![settings], false);
/// An `openapi` block's `base_url` and `security` credentials.
pub const OPENAPI: Scope = scope(
    "an `openapi` base_url or security credential",
    roots![settings auth],
    false,
);
/// A webhook `secret`.
pub const SECRET: Scope = scope("a webhook `secret`", roots![settings], false);
/// Request templates of `stateless_http`.
pub const HTTP: Scope = scope(
    "a `stateless_http` request",
    roots![parameters settings runtime agent mount auth context],
    false,
);
/// A `stateful_session`'s `create` (`initialize`) request: the session does not exist yet.
pub const SESSION_CREATE: Scope = Scope {
    place: "a session's `create` request",
    ..HTTP
};
/// A `stateful_session`'s `execute` and `destroy` (`teardown`) requests.
pub const SESSION_REQUEST: Scope = scope(
    "a session request",
    roots![parameters settings session runtime agent mount auth context],
    false,
);
/// A `kubernetes_job`'s `namespace` and the string leaves of its `spec`.
pub const KUBERNETES_JOB: Scope = scope(
    "a `kubernetes_job` template",
    roots![parameters settings runtime agent context],
    false,
);
/// A `kubernetes_job`'s `api_server` and `token`: the operator's settings only, so that no
/// value the LLM chooses can send the Job, or the token, elsewhere.
pub const KUBERNETES_API: Scope = scope(
    "a `kubernetes_job` `api_server` or `token`",
    roots![settings],
    false,
);
/// `receive.subscription.subscribe`.
pub const SUBSCRIBE: Scope = scope(
    "a subscription request",
    roots![parameters settings auth runtime subscription],
    false,
);
/// `receive.subscription.unsubscribe`.
pub const UNSUBSCRIBE: Scope = scope(
    "an unsubscribe request",
    roots![parameters settings auth runtime subscription subscribe],
    false,
);
/// `receive.poll` request templates.
pub const POLL_REQUEST: Scope = scope(
    "a poll request",
    roots![parameters settings auth runtime poll],
    false,
);
/// `receive.poll.detect` and `receive.poll.cursor`.
pub const POLL_DETECT: Scope = scope(
    "`detect` and `cursor`",
    roots![response poll parameters],
    false,
);
/// `receive.poll.id`.
pub const POLL_ITEM: Scope = scope("`id`", roots![item], false);
/// Trigger `source.before` steps.
pub const TRIGGER_BEFORE: Scope = scope("a trigger `source.before` step", roots![event now], false);
/// Trigger `message`.
pub const TRIGGER_MESSAGE: Scope = scope("a trigger `message`", roots![event now], false);
