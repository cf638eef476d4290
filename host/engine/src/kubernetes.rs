//! The `kubernetes_job` runtime: each call creates a Job from the action's template through
//! the Kubernetes API, waits for it to end (or for the call's timeout, or an interrupt of the
//! task), reads its pod's log and exit code, and deletes the Job (propagation: background).
//!
//! The API is the one `api_server` names, with `token` as the bearer (both templates over the
//! tool's settings), or — without `api_server` — the cluster the host runs in, through its
//! service account (`KUBERNETES_SERVICE_HOST`/`_PORT`, the account's token and CA).
//!
//! What the API or the Job does is an observation for the LLM: an unreachable or refusing
//! API, a Job that does not end in time (deleted then), one that was deleted by someone else.
//! A Job whose pod fails is a result like any other, with its exit code and log. Only a host
//! that has no API to talk to (no `api_server`, not in a cluster) ends the task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_expr::Activation;
use agentmesh_llm::{Capped, read_capped};
use agentmesh_secrets::Secrets;
use serde_json::{Map, Value, json};

use crate::Engine;
use crate::outcome::ActionResult;
use crate::plan::kubernetes::JobPlan;

/// Where a pod finds its service account's token and the cluster's CA.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The largest answer of the API read for a Job or a pod list: they are small, and a server
/// that streams without end must not exhaust memory.
const MAX_API_ANSWER: usize = 4 * 1024 * 1024;

/// How long one request to the API may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The first and the longest pause between two reads of a running Job's status.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// Reads of a Job's status that may fail in a row (the API restarting, a dropped connection)
/// before the call gives up on it.
const FAILED_READS: u32 = 3;

/// How much of a refusal that is not a `Status` object an error quotes (a proxy's error page
/// can be long).
const REFUSAL_BYTES: usize = 200;

/// The API server a call talks to.
struct Api {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    /// Replaced in what the API answers before it is quoted (see [`Api::refusal`]).
    secrets: Arc<Secrets>,
}

impl Api {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .timeout(REQUEST_TIMEOUT);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        req
    }

    /// Sends `req`: the answer, or what went wrong, as a sentence.
    async fn response(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
        req.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("the Kubernetes API at `{}` timed out", self.base)
            } else {
                format!("the Kubernetes API at `{}` is unreachable: {e}", self.base)
            }
        })
    }

    /// Sends `req` and reads the answer (at most `cap` bytes): the status and the body, or
    /// what went wrong, as a sentence.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        cap: usize,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
        let response = self.response(req).await?;
        let status = response.status();
        match read_capped(response, cap).await {
            Ok(bytes) => Ok((status, bytes.to_vec())),
            Err(Capped::Read(e)) => Err(format!("reading the Kubernetes API's answer: {e}")),
            Err(Capped::TooLarge) => Err(format!(
                "the Kubernetes API's answer is larger than {cap} bytes"
            )),
        }
    }

    /// A refusal of the API as a sentence: its status and the `message` of its `Status`
    /// object, or the start of the body (at most [`REFUSAL_BYTES`]), secrets replaced before
    /// it is cut (cut first, a secret's head would be left where the cut fell).
    fn refusal(&self, status: reqwest::StatusCode, body: &[u8]) -> String {
        let message = serde_json::from_slice::<Map<String, Value>>(body)
            .ok()
            .and_then(|m| m.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| {
                let body = self.secrets.scrub_bytes(body);
                String::from_utf8_lossy(&body[..body.len().min(REFUSAL_BYTES)]).into_owned()
            });
        format!("HTTP {}: {message}", status.as_u16())
    }

    /// A JSON answer of a successful request, or what went wrong.
    async fn json(&self, req: reqwest::RequestBuilder, what: &str) -> Result<Value, String> {
        let (status, bytes) = self.send(req, MAX_API_ANSWER).await?;
        if !status.is_success() {
            return Err(format!("{what}: {}", self.refusal(status, &bytes)));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("{what}: the Kubernetes API answered with no JSON object: {e}"))
    }
}

/// Runs one call of a `kubernetes_job` action for task `task`, with the call's variables in
/// `act`.
pub(crate) async fn run(
    engine: &Engine,
    plan: &JobPlan,
    act: &Activation,
    task: &str,
) -> ActionResult {
    let api = match api(plan, act, engine.secrets()) {
        Ok(api) => api,
        Err(end) => return end,
    };
    let namespace = match plan.namespace.render(act) {
        Ok(ns) if is_dns_label(&ns) => ns,
        Ok(ns) => {
            return ActionResult::Recoverable(format!(
                "`{ns}` is not a Kubernetes namespace name (lower-case letters, digits and `-`, at most 63)"
            ));
        }
        Err(e) => return ActionResult::Recoverable(format!("namespace: {e}")),
    };
    let spec = match plan.spec.render(act) {
        Ok(spec) => spec,
        Err(e) => return ActionResult::Recoverable(format!("spec: {e}")),
    };
    let container = spec
        .pointer("/template/spec/containers/0/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let jobs = format!("/apis/batch/v1/namespaces/{namespace}/jobs");
    let object = job_object(spec, task);
    let created = api
        .json(
            api.request(reqwest::Method::POST, &jobs).json(&object),
            "creating the Job",
        )
        .await;
    let name = match created.map(|job| job.pointer("/metadata/name").cloned()) {
        Ok(Some(Value::String(name))) if is_dns_name(&name) => name,
        Ok(_) => {
            return ActionResult::Recoverable(
                "creating the Job: the Kubernetes API's answer names no Job".into(),
            );
        }
        Err(e) => return ActionResult::Recoverable(e),
    };
    let job = Created {
        api: &api,
        path: format!("{jobs}/{name}"),
        name: name.clone(),
        deleted: false,
    };
    let ended = wait(engine, &api, &job, plan.timeout, task).await;
    let result = match ended {
        Ok(succeeded) => {
            let pod = pod_of(
                &api,
                &namespace,
                &name,
                container.as_deref(),
                plan.max_output,
            )
            .await;
            match pod {
                Ok(pod) => ActionResult::Ok(json!({
                    "job": name,
                    "namespace": namespace,
                    "status": if succeeded { "succeeded" } else { "failed" },
                    "exit_code": pod.exit_code,
                    "log": pod.log,
                    "log_truncated": pod.truncated,
                })),
                Err(e) => ActionResult::Recoverable(format!("the Job `{name}` ended, but {e}")),
            }
        }
        Err(why) => ActionResult::Recoverable(why),
    };
    job.delete().await;
    result
}

/// The API server of `plan`: its `api_server` and `token`, or the cluster the host runs in.
fn api(plan: &JobPlan, act: &Activation, secrets: Arc<Secrets>) -> Result<Api, ActionResult> {
    // Both are templates over the operator's settings: a value that does not render or
    // parse is the configuration's fault, not the LLM's.
    let token = match &plan.token {
        Some(t) => Some(
            t.render(act)
                .map_err(|e| ActionResult::Fatal(format!("kubernetes_job `token`: {e}")))?,
        ),
        None => None,
    };
    if let Some(server) = &plan.api_server {
        let base = server
            .render(act)
            .map_err(|e| ActionResult::Fatal(format!("kubernetes_job `api_server`: {e}")))?;
        let url = reqwest::Url::parse(&base).map_err(|e| {
            ActionResult::Fatal(format!(
                "kubernetes_job `api_server`: `{base}` is not a URL: {e}"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ActionResult::Fatal(format!(
                "kubernetes_job `api_server`: `{base}` is not an http(s) URL"
            )));
        }
        let client = agentmesh_llm::http_client()
            .build()
            .map_err(|e| ActionResult::Fatal(format!("an HTTP client: {e}")))?;
        return Ok(Api {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token,
            secrets,
        });
    }
    in_cluster(token, secrets).map_err(ActionResult::Fatal)
}

/// The API of the cluster the host runs in, through its service account.
fn in_cluster(token: Option<String>, secrets: Arc<Secrets>) -> Result<Api, String> {
    let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Err("the `kubernetes_job` action names no `api_server`, and this host does not run in a Kubernetes cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset)".into());
    };
    let read = |file: &str| {
        std::fs::read(format!("{SERVICE_ACCOUNT}/{file}"))
            .map_err(|e| format!("reading the service account's {file} in {SERVICE_ACCOUNT}: {e}"))
    };
    let token = match token {
        Some(t) => t,
        None => String::from_utf8_lossy(&read("token")?).trim().to_owned(),
    };
    let ca = reqwest::Certificate::from_pem(&read("ca.crt")?)
        .map_err(|e| format!("the service account's ca.crt: {e}"))?;
    let client = agentmesh_llm::http_client()
        .add_root_certificate(ca)
        .build()
        .map_err(|e| format!("an HTTP client: {e}"))?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(Api {
        client,
        base: format!("https://{host}:{port}"),
        token: Some(token),
        secrets,
    })
}

/// The Job to create from the rendered `spec`: no retries and pods that are not restarted
/// unless the spec says otherwise (a call runs once), and the task it runs for noted on it.
fn job_object(mut spec: Value, task: &str) -> Value {
    if let Value::Object(s) = &mut spec {
        s.entry("backoffLimit").or_insert(json!(0));
        if let Some(Value::Object(pod)) = s
            .get_mut("template")
            .and_then(|t| t.as_object_mut())
            .and_then(|t| t.get_mut("spec"))
        {
            pod.entry("restartPolicy").or_insert(json!("Never"));
        }
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": "agentmesh-",
            "labels": {"app.kubernetes.io/managed-by": "agentmesh"},
            "annotations": {"agentmesh.dev/task": task},
        },
        "spec": spec,
    })
}

/// A Job this call created: deleted when the call is done with it, or — should the call be
/// dropped before (the host stopping) — as soon as it is dropped.
struct Created<'a> {
    api: &'a Api,
    path: String,
    name: String,
    deleted: bool,
}

impl Created<'_> {
    fn delete_request(&self) -> reqwest::RequestBuilder {
        self.api.request(
            reqwest::Method::DELETE,
            &format!("{}?propagationPolicy=Background", self.path),
        )
    }

    async fn delete(mut self) {
        self.deleted = true;
        match self.api.send(self.delete_request(), MAX_API_ANSWER).await {
            Ok((status, _)) if status.is_success() || status == reqwest::StatusCode::NOT_FOUND => {}
            Ok((status, bytes)) => tracing::warn!(
                job = %self.name,
                "deleting the Job: {}", self.api.refusal(status, &bytes)
            ),
            Err(e) => tracing::warn!(job = %self.name, "deleting the Job: {e}"),
        }
    }
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let request = self.delete_request();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = request.send().await;
            });
        }
    }
}

/// Waits for `job` to end: whether it succeeded, or why the call ends without it (the
/// timeout, an interrupt of the task, the Job gone, the API failing).
async fn wait(
    engine: &Engine,
    api: &Api,
    job: &Created<'_>,
    timeout: Duration,
    task: &str,
) -> Result<bool, String> {
    let deadline = Instant::now() + timeout;
    let mut pause = FIRST_PAUSE;
    let mut failed = 0;
    loop {
        match api
            .send(api.request(reqwest::Method::GET, &job.path), MAX_API_ANSWER)
            .await
        {
            Ok((status, bytes)) if status.is_success() => {
                failed = 0;
                let object: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if let Some(succeeded) = ended(&object) {
                    return Ok(succeeded);
                }
            }
            Ok((reqwest::StatusCode::NOT_FOUND, _)) => {
                return Err(format!(
                    "the Job `{}` was deleted before it ended",
                    job.name
                ));
            }
            Ok((status, bytes)) => {
                failed += 1;
                if failed >= FAILED_READS {
                    return Err(format!("reading the Job: {}", api.refusal(status, &bytes)));
                }
            }
            Err(e) => {
                failed += 1;
                if failed >= FAILED_READS {
                    return Err(e);
                }
            }
        }
        if engine.interrupt_requested(task) {
            return Err(format!(
                "interrupted: the Job `{}` was deleted before it ended",
                job.name
            ));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "the Job `{}` did not end within {}; it was deleted",
                job.name,
                agentmesh_manifest::model::common::Duration(timeout)
            ));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Whether a Job object says it ended: `Some(true)` complete, `Some(false)` failed.
fn ended(job: &Value) -> Option<bool> {
    let conditions = job.pointer("/status/conditions")?.as_array()?;
    conditions
        .iter()
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .find_map(|c| match c.get("type").and_then(Value::as_str) {
            Some("Complete") => Some(true),
            Some("Failed") => Some(false),
            _ => None,
        })
}

/// What a Job's pod left.
struct Pod {
    exit_code: Option<i64>,
    log: String,
    truncated: bool,
}

/// The newest pod of Job `name`: its container's exit code and log (at most `max` bytes).
async fn pod_of(
    api: &Api,
    namespace: &str,
    name: &str,
    container: Option<&str>,
    max: usize,
) -> Result<Pod, String> {
    let list = api
        .json(
            api.request(
                reqwest::Method::GET,
                &format!("/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{name}"),
            ),
            "listing its pods",
        )
        .await?;
    let newest = list
        .get("items")
        .and_then(Value::as_array)
        .and_then(|pods| {
            pods.iter().max_by_key(|p| {
                p.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
        });
    let Some(pod) = newest else {
        // A Job can fail before any pod starts (a deadline, a quota).
        return Ok(Pod {
            exit_code: None,
            log: String::new(),
            truncated: false,
        });
    };
    let pod_name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| is_dns_name(n))
        .ok_or("its pod has no valid name")?;
    let status = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter().find(|s| {
                container.is_none_or(|c| s.get("name").and_then(Value::as_str) == Some(c))
            })
        });
    let exit_code = status.and_then(|s| {
        s.pointer("/state/terminated/exitCode")
            .or_else(|| s.pointer("/lastState/terminated/exitCode"))
            .and_then(Value::as_i64)
    });
    // A secret where the log is cut is replaced whole: read with as much more as the longest
    // secret, and scrubbed as far as the cut (`Secrets::scrub_prefix`).
    let read = max.saturating_add(api.secrets.longest());
    let mut query = format!("limitBytes={}", read.saturating_add(1));
    if let Some(c) = container.filter(|c| is_dns_label(c)) {
        query.push_str(&format!("&container={c}"));
    }
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod_name}/log?{query}");
    let mut response = api
        .response(api.request(reqwest::Method::GET, &path))
        .await?;
    let status = response.status();
    // The first `read` bytes and one more, to know whether there were more; the rest is not
    // read (an API server may ignore `limitBytes`).
    let mut bytes = Vec::new();
    while bytes.len() <= read {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                bytes.extend_from_slice(&chunk[..chunk.len().min(read + 1 - bytes.len())])
            }
            Ok(None) => break,
            Err(e) => return Err(format!("reading its log: {e}")),
        }
    }
    if !status.is_success() {
        return Err(format!("reading its log: {}", api.refusal(status, &bytes)));
    }
    let unread = bytes.len() > read;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(read)]);
    let (log, cut) = api.secrets.scrub_prefix(&text, max);
    let truncated = unread || cut;
    let mut log = log.into_owned();
    if truncated && log.ends_with('\u{FFFD}') {
        log.pop();
    }
    Ok(Pod {
        exit_code,
        log,
        truncated,
    })
}

/// A DNS label (RFC 1123), what a namespace or container name must be: lower-case letters,
/// digits and `-`, starting and ending with a letter or digit, at most 63. Checked before a
/// value goes into a request path, so that no value can reach another path of the API.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS subdomain name (RFC 1123), what a Job's or pod's name is: labels joined by `.`, at
/// most 253.
fn is_dns_name(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dns_labels_are_namespaces() {
        for ok in ["default", "ci-1", "a"] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a/b", "..", "a.b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_name("agentmesh-abc12.x"));
        assert!(!is_dns_name("a/../b"));
    }

    #[test]
    fn a_job_ends_on_a_true_complete_or_failed_condition() {
        let job = |conditions: Value| json!({"status": {"conditions": conditions}});
        assert_eq!(ended(&json!({"status": {"active": 1}})), None);
        assert_eq!(
            ended(&job(json!([{"type": "Complete", "status": "True"}]))),
            Some(true)
        );
        assert_eq!(
            ended(&job(json!([{"type": "Failed", "status": "True"}]))),
            Some(false)
        );
        assert_eq!(
            ended(&job(json!([{"type": "Failed", "status": "False"}]))),
            None
        );
        assert_eq!(
            ended(&job(
                json!([{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}])
            )),
            Some(true)
        );
    }

    #[test]
    fn the_job_runs_once_unless_its_spec_says_otherwise() {
        let spec = json!({"template": {"spec": {"containers": [{"name": "c"}]}}});
        let job = job_object(spec, "t_1");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
        assert_eq!(job["metadata"]["annotations"]["agentmesh.dev/task"], "t_1");
        let spec = json!({"backoffLimit": 2, "template": {"spec": {"restartPolicy": "OnFailure"}}});
        let job = job_object(spec, "t_1");
        assert_eq!(job["spec"]["backoffLimit"], 2);
        assert_eq!(
            job["spec"]["template"]["spec"]["restartPolicy"],
            "OnFailure"
        );
    }
}
