//! [`AgentServer`]: one MCP session of an agent, over the engine.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use agentmesh_engine::{DirectEnd, Engine, EngineError};
use agentmesh_model::event::ToolSchema;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::SessionOf;

/// The key of the session's task id in the `_meta` of the `initialize` answer.
pub const TASK_META: &str = "agentmesh/task_id";

/// One MCP session of an agent: the task it opened, and whose it is.
pub struct AgentServer {
    engine: Engine,
    /// Whose session it is when the transport says nothing of it (stdio).
    fixed: Option<SessionOf>,
    /// Set by `initialize`.
    open: OnceLock<Open>,
}

/// An opened session.
struct Open {
    /// The session's task.
    task: String,
    /// Whose it is.
    of: SessionOf,
}

impl AgentServer {
    /// A session of `fixed`, or (with `None`) of the [`SessionOf`] its requests carry.
    pub fn new(engine: Engine, fixed: Option<SessionOf>) -> AgentServer {
        AgentServer {
            engine,
            fixed,
            open: OnceLock::new(),
        }
    }

    /// The session's task, once `initialize` opened it.
    pub fn task(&self) -> Option<String> {
        self.open.get().map(|o| o.task.clone())
    }

    /// Whose request this is: the fixed owner, or the one the server put into it.
    fn requester(&self, context: &RequestContext<RoleServer>) -> Result<SessionOf, ErrorData> {
        if let Some(of) = &self.fixed {
            return Ok(of.clone());
        }
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<SessionOf>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request names no caller", None))
    }

    /// The opened session, if `context`'s caller is its owner.
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<&Open, ErrorData> {
        let open = self
            .open
            .get()
            .ok_or_else(|| ErrorData::invalid_request("the session is not initialized", None))?;
        let caller = self.requester(context)?;
        if caller.user.id != open.of.user.id || caller.agent != open.of.agent {
            return Err(ErrorData::invalid_request(
                "this MCP session belongs to another caller or agent",
                None,
            ));
        }
        Ok(open)
    }
}

impl Drop for AgentServer {
    /// A session that ends without its transport saying so (an HTTP session expiring) ends
    /// its task too.
    fn drop(&mut self) {
        let (Some(open), Ok(handle)) = (self.open.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let engine = self.engine.clone();
        handle.spawn(async move {
            if let Err(e) = engine.close_session(&open.task).await {
                tracing::warn!(task.id = %open.task, "ending the MCP session's task: {e}");
            }
        });
    }
}

impl ServerHandler for AgentServer {
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::default();
        implementation.name = "agentmesh".into();
        implementation.version = env!("CARGO_PKG_VERSION").into();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(implementation)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let mut answer = self.negotiate_initialize(&request)?;
        if self.open.get().is_some() {
            return Err(ErrorData::invalid_request(
                "the session is initialized already",
                None,
            ));
        }
        let of = self.requester(&context)?;
        let client = json!({
            "name": request.client_info.name,
            "version": request.client_info.version,
        });
        let record = self
            .engine
            .open_session(&of.agent, of.user.clone(), client)
            .await
            .map_err(engine_error)?;
        // The client learns its task, to read it through the task API.
        let meta = JsonObject::from_iter([(TASK_META.to_owned(), json!(record.id))]);
        answer.meta = Some(MetaObject(meta));
        let open = Open {
            task: record.id,
            of,
        };
        if let Err(open) = self.open.set(open) {
            // Another `initialize` won the race: this one's task ends at once.
            let _ = self.engine.close_session(&open.task).await;
            return Err(ErrorData::invalid_request(
                "the session is initialized already",
                None,
            ));
        }
        context.peer.set_peer_info(request);
        Ok(answer)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let open = self.session(&context)?;
        let functions = self
            .engine
            .functions(&open.of.agent)
            .map_err(engine_error)?;
        Ok(ListToolsResult::with_all_items(
            functions.iter().map(tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let open = self.session(&context)?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        // A client's `notifications/cancelled` for this request cancels `context.ct`.
        let end = self
            .engine
            .call_direct(&open.task, &request.name, arguments, context.ct.cancelled())
            .await;
        Ok(CallToolResponse::Complete(match end {
            Ok(DirectEnd::Unknown) => {
                return Err(ErrorData::invalid_params(
                    format!("there is no tool `{}`", request.name),
                    None,
                ));
            }
            Ok(end) => result(end),
            Err(EngineError::Conflict(message)) => failed(format!("the session's {message}")),
            Err(e) => return Err(engine_error(e)),
        }))
    }
}

/// A function as an MCP tool.
fn tool(function: &ToolSchema) -> Tool {
    let schema: JsonObject = match &function.parameters {
        Value::Object(m) => m.clone(),
        _ => JsonObject::from_iter([("type".to_owned(), json!("object"))]),
    };
    Tool::new(
        function.name.clone(),
        function.description.clone(),
        Arc::new(schema),
    )
}

/// A call's end as the client sees it: a result (JSON text, and the value itself as
/// structured content when it is an object), or a tool error with the reason.
fn result(end: DirectEnd) -> CallToolResult {
    match end {
        DirectEnd::Observation(value) => {
            let text = match &value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            if value.is_object() {
                result.structured_content = Some(value);
            }
            result
        }
        DirectEnd::Error(e) => failed(e),
        DirectEnd::Rejected(reason) => failed(format!("refused: {reason}")),
        DirectEnd::Terminated(why) => failed(format!("the task ended: {why}")),
        DirectEnd::Unknown => failed("there is no such tool".into()),
    }
}

fn failed(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn engine_error(e: EngineError) -> ErrorData {
    match e {
        EngineError::NotFound(m) => ErrorData::invalid_params(m, None),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}
