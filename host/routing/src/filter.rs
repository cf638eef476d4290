//! Allow-list filters (CONTRACT §5): a tool event's `receive.filter`, evaluated against an
//! inbound event and one task's allow lists.
//!
//! In a filter, `parameters.X` stands for the task's allow-list set for X. The filter passes
//! when some choice of one value per referenced set makes it true, so
//! `event.payload.user == parameters.author` is set membership. A referenced set that is
//! empty (or absent) discards the event, and an evaluation error counts as false: filters
//! fail closed.

use std::fmt;
use std::sync::Arc;

use agentmesh_expr::{Activation, Bound, CompileError, Expression};
use serde_json::{Map, Value as Json};

use crate::allow_list::{AllowLists, readings, value_key};
use crate::analysis::{Analysis, Binding, Parameters, Pin, analyse};

/// The most choices of one value per set a filter is evaluated for, per event and task.
///
/// A set grows with every action call the LLM makes, and a filter over k sets that no
/// conjunct pins (see [`Filter::pins`]) costs the product of their sizes: without a bound, a
/// task could make every event cost seconds of CPU. Beyond the bound the filter does not
/// pass — the contract's rule for a filter that cannot be decided is to fail closed — and a
/// warning names the filter. Pinned sets do not count: a pin keeps only the values equal to
/// the event's, so the realistic filters (`… == parameters.owner && … == parameters.repo`)
/// cost one evaluation whatever the sizes of their sets.
pub const MAX_COMBINATIONS: usize = 4096;

/// An inbound event as filters read it: the CEL variable `event`, `{"name", "payload",
/// "headers", "delivery_id", "received_at"}` (CONTRACT §5), bound once and shared by every
/// filter and task it is routed through.
#[derive(Clone)]
pub struct Event {
    activation: Activation,
}

impl Event {
    /// Binds `event`, the value of the CEL variable `event`.
    pub fn new(event: Json) -> Event {
        Event::shared(&Bound::new(event))
    }

    /// Binds `event`, shared with the other readers of the delivery's event (its tasks'
    /// middleware and messages).
    pub fn shared(event: &Bound) -> Event {
        let mut activation = Activation::new();
        activation.bind("event", event.clone());
        Event { activation }
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").finish_non_exhaustive()
    }
}

/// A compiled `receive.filter` and what routing needs to know about it, worked out once:
/// the sets it references and its [pins](Filter::pins).
#[derive(Debug)]
pub struct Filter {
    expression: Arc<Expression>,
    analysis: Analysis,
}

impl Filter {
    /// Analyses a compiled filter (the plan's: filters are compiled once, with the rest of the
    /// configuration).
    pub fn new(expression: Arc<Expression>) -> Filter {
        let analysis = analyse(&expression);
        Filter {
            expression,
            analysis,
        }
    }

    /// Compiles and analyses `source`.
    pub fn compile(source: &str) -> Result<Filter, CompileError> {
        Expression::compile(source).map(|e| Filter::new(Arc::new(e)))
    }

    /// The filter's expression.
    pub fn expression(&self) -> &Expression {
        &self.expression
    }

    /// The names of the sets the filter references, or `None` when it uses `parameters` in
    /// a way that cannot be named (`parameters[event.key]`, `size(parameters)`): then every
    /// set of the task counts as referenced.
    pub fn referenced_parameters(&self) -> Option<Vec<&str>> {
        match &self.analysis.parameters {
            Parameters::Named(named) => Some(named.keys().map(String::as_str).collect()),
            Parameters::All => None,
        }
    }

    /// The top-level conjuncts that tie a parameter to a value computed from the event
    /// alone (`event.payload.user.login == parameters.author`). They let the subscription
    /// index find the tasks an event can match without trying the others, and spare the
    /// filter from trying values that cannot match. A filter without pins is still correct,
    /// only evaluated for every subscription.
    pub fn pins(&self) -> &[Pin] {
        &self.analysis.pins
    }

    /// Whether the filter reads any allow list; one that does not has the same verdict for
    /// every task.
    pub fn reads_parameters(&self) -> bool {
        !matches!(&self.analysis.parameters, Parameters::Named(named) if named.is_empty())
    }

    /// Whether `event` passes for a task with `allow_lists`.
    pub fn matches(&self, event: &Event, allow_lists: &AllowLists) -> bool {
        self.pin_keys(event)
            .is_some_and(|keys| self.matches_pinned(event, allow_lists, &keys))
    }

    /// The key of each pin's event side for `event`, or `None` when one fails to evaluate
    /// (then the pin's conjunct cannot be true, nor the filter).
    pub(crate) fn pin_keys(&self, event: &Event) -> Option<Vec<String>> {
        self.pins()
            .iter()
            .map(|pin| {
                pin.event_side()
                    .evaluate(&event.activation)
                    .ok()
                    .map(|value| value_key(&value))
            })
            .collect()
    }

    /// [`Filter::matches`] with the pins' keys already computed by [`Filter::pin_keys`].
    pub(crate) fn matches_pinned(
        &self,
        event: &Event,
        allow_lists: &AllowLists,
        keys: &[String],
    ) -> bool {
        let referenced: Vec<(&str, Binding)> = match &self.analysis.parameters {
            Parameters::Named(named) => named.iter().map(|(n, b)| (n.as_str(), *b)).collect(),
            Parameters::All => allow_lists
                .keys()
                .map(|n| (n.as_str(), Binding::Each))
                .collect(),
        };
        let mut whole = Map::new();
        let mut choices: Vec<(&str, Vec<Json>)> = Vec::new();
        for (name, binding) in referenced {
            let Some(set) = allow_lists.get(name).filter(|set| !set.is_empty()) else {
                return false;
            };
            // The pins on this set: a value whose key differs from a pin's cannot satisfy
            // that conjunct.
            let pinned: Vec<&str> = self
                .pins()
                .iter()
                .zip(keys)
                .filter(|(pin, _)| pin.parameter() == name)
                .map(|(_, key)| key.as_str())
                .collect();
            let values = set.iter().flat_map(|stored| readings(stored));
            match binding {
                Binding::Whole => {
                    let values: Vec<_> = values.collect();
                    let reachable = pinned
                        .iter()
                        .all(|key| values.iter().any(|r| r.key == *key));
                    if !reachable {
                        return false;
                    }
                    let list = values.into_iter().map(|r| r.value).collect();
                    whole.insert(name.to_owned(), Json::Array(list));
                }
                Binding::Each => {
                    let values: Vec<Json> = values
                        .filter(|r| pinned.iter().all(|key| r.key == *key))
                        .map(|r| r.value)
                        .collect();
                    if values.is_empty() {
                        return false;
                    }
                    choices.push((name, values));
                }
            }
        }
        let combinations = choices
            .iter()
            .try_fold(1usize, |n, (_, values)| n.checked_mul(values.len()));
        if combinations.is_none_or(|n| n > MAX_COMBINATIONS) {
            tracing::warn!(
                filter = self.expression.source(),
                limit = MAX_COMBINATIONS,
                "allow-list filter has too many combinations to evaluate; not routed"
            );
            return false;
        }
        self.any_choice(event, &whole, &choices)
    }

    /// Whether the expression is true for some choice of one value from each of `choices`,
    /// with the `whole` sets bound as they are.
    fn any_choice(
        &self,
        event: &Event,
        whole: &Map<String, Json>,
        choices: &[(&str, Vec<Json>)],
    ) -> bool {
        // An odometer over the choices: position i indexes into choices[i].
        let mut position = vec![0usize; choices.len()];
        loop {
            let mut parameters = whole.clone();
            for ((name, values), &at) in choices.iter().zip(&position) {
                if let Some(value) = values.get(at) {
                    parameters.insert((*name).to_owned(), value.clone());
                }
            }
            let mut activation = event.activation.clone();
            activation.set("parameters", Json::Object(parameters));
            if self.expression.evaluate_bool(&activation) == Ok(true) {
                return true;
            }
            let mut digit = 0;
            loop {
                let (Some(at), Some((_, values))) = (position.get_mut(digit), choices.get(digit))
                else {
                    return false;
                };
                *at += 1;
                if *at < values.len() {
                    break;
                }
                *at = 0;
                digit += 1;
            }
        }
    }
}
