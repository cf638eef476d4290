//! What a delivery of tool events brings, decided at the engine's door while its delivery id
//! is held there: each event routed through the subscription index (`routes`), then admitted
//! by each matched task ([`Engine::admit_event`]: its filter component, its capability's
//! middleware, the message), one input per admitted task; a task whose middleware asks to be
//! locked gets its lock instead ([`Input::lock`], written with the inputs).

use agentmesh_engine::plan::{EventPlan, ToolPlan};
use agentmesh_engine::{Admission, Admitted, Arrival, Engine, EngineError, Input, Origin};
use agentmesh_expr::Bound;
use agentmesh_model::event::ContentPart;
use serde_json::json;

use crate::Event;
use crate::routes::SharedRoutes;

/// The inputs `events` of `tool` (their `payload`, from `origin`) bring the tasks
/// subscribed to them (of those, the ones `keep` keeps), and the locks their middleware asks
/// for; nothing, and the delivery id left unremembered, when no task takes one or is locked.
/// A task gone since routing matched it does not take the event. `Err` when the host failed
/// to decide a task's admission (its record unreadable): the delivery is refused whole, its
/// id left unremembered, so that the sender's retry reaches every task — accepting it for
/// the others would leave that task without the event for good.
pub(crate) async fn tool_events(
    engine: &Engine,
    routes: &SharedRoutes,
    (tool, events): (&ToolPlan, &[&EventPlan]),
    (payload, origin): (&Bound, &Origin),
    arrival: &Arrival<'_>,
    keep: impl Fn(&str) -> bool,
) -> Result<Admitted<()>, EngineError> {
    let tool_id = tool.id();
    let fired_at = arrival.fired_at();
    let mut inputs: Vec<Input> = Vec::new();
    for event in events {
        let event_json = arrival.event(&event.name, payload);
        let routed = Event::shared(&event_json);
        let tasks = routes
            .read()
            .route(&tool_id, &event.name, &routed, fired_at);
        for task in tasks.into_iter().filter(|t| keep(t)) {
            let admitted = match engine.admit_event(tool, event, &task, &event_json).await {
                Ok(admitted) => admitted,
                // Deleted (or its agent removed by a reload) since routing saw it.
                Err(EngineError::NotFound(e)) => {
                    tracing::debug!(task.id = %task, tool.name = %tool_id, "event not taken: {e}");
                    Admission::Drop
                }
                Err(e) => {
                    tracing::warn!(task.id = %task, tool.name = %tool_id, event = %event.name, "the delivery is refused: admitting it failed: {e}");
                    return Err(e);
                }
            };
            let text = match admitted {
                Admission::Take(text) => text,
                Admission::Drop => continue,
                Admission::Lock(reason) => {
                    inputs.push(Input::lock(task, reason, origin.clone()));
                    continue;
                }
            };
            inputs.push(Input::new(
                task,
                json!({"message": [ContentPart::text(text)]}),
                origin.clone(),
            ));
        }
    }
    Ok(match inputs.is_empty() {
        true => Admitted::Nothing(()),
        false => Admitted::Inputs(inputs, ()),
    })
}
