//! The `openapi` runtime against stand-in servers on loopback: the OAI petstore document (a
//! fixture) loaded when the config loads, each action calling the operation its `operation`
//! names with its values placed as the document says, the parameters the LLM is offered
//! derived from the operation, the base URL overridden by the manifest, security schemes
//! given from settings (never shown), failures of the remote API told to the LLM, and the
//! problems of a document reported by `validate` at their place in the manifest.

use std::sync::mpsc::Receiver;
use std::time::Duration;

use agentmesh_testkit::Request;
use agentmesh_testkit::fixtures::{config_dir, scripted_agent};
use serde_json::{Value, json};

use crate::util::{agentmesh, completion, events, events_text, observations, run_json};

/// The OAI petstore example as OpenAPI 3.1.
const PETSTORE: &str = include_str!("../fixtures/openapi/petstore.yaml");

/// A tool `t/pets` over the petstore document in the config dir, its three operations as
/// actions, requests going to `base` (the manifest's `base_url`, over the document's server).
fn petstore_tool(base: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: pets
description: The petstore.
settings:
  type: object
  properties:
    base: {{type: string, default: \"{base}\"}}
openapi:
  url: petstore.yaml
  base_url: \"{{settings.base}}\"
actions:
  - {{name: list, description: List pets., execute: {{openapi: {{operation: listPets}}}}}}
  - {{name: show, description: One pet., execute: {{openapi: {{operation: showPetById}}}}}}
  - {{name: create, description: Add a pet., execute: {{openapi: {{operation: createPets}}}}}}
"
    )
}

/// The next request the stand-in server received.
fn next(received: &Receiver<Request>) -> Request {
    received
        .recv_timeout(Duration::from_secs(10))
        .expect("the stand-in server received no request")
}

#[test]
fn petstore_operations_place_query_path_and_body_as_the_document_says() {
    let (port, received) = agentmesh_testkit::serve(3, |r| match r.request_line.as_str() {
        l if l.starts_with("POST") => ("201 Created", String::new()),
        l if l.starts_with("GET /v1/pets?") => {
            ("200 OK", json!([{"id": 1, "name": "Rex"}]).to_string())
        }
        _ => (
            "200 OK",
            json!({"id": 7, "name": "Tom", "tag": "cat"}).to_string(),
        ),
    });
    let script = "responses:
  - tool_calls: [{name: pets_list, arguments: {limit: 2}}]
  - tool_calls: [{name: pets_show, arguments: {petId: \"a b/7\"}}]
  - tool_calls: [{name: pets_create, arguments: {id: 7, name: Tom}}]
  - text: done
";
    let dir = config_dir(&[
        ("petstore.yaml", PETSTORE),
        (
            "tool.yaml",
            &petstore_tool(&format!("http://127.0.0.1:{port}/v1")),
        ),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {pets: \"*\"}\n"),
        ),
        ("script.yaml", script),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    // The base URL is the manifest's (its path kept), not the document's server.
    let list = next(&received);
    assert_eq!(list.request_line, "GET /v1/pets?limit=2 HTTP/1.1");
    // A path value is one segment, whatever it holds.
    let show = next(&received);
    assert_eq!(show.request_line, "GET /v1/pets/a%20b%2F7 HTTP/1.1");
    // The body's properties are parameters of their own; an optional one not given is left
    // out rather than sent as null.
    let create = next(&received);
    assert_eq!(create.request_line, "POST /v1/pets HTTP/1.1");
    assert_eq!(create.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_str(&create.body).unwrap();
    assert_eq!(body, json!({"id": 7, "name": "Tom"}));
    let obs = observations(&events(&data, &task));
    assert_eq!(
        obs,
        [
            json!([{"id": 1, "name": "Rex"}]),
            json!({"id": 7, "name": "Tom", "tag": "cat"}),
            Value::Null,
        ]
    );
}

#[test]
fn the_llm_is_offered_the_parameters_the_operation_declares() {
    // A model endpoint that answers at once and records what it was sent.
    let (model, asked) = agentmesh_testkit::serve(1, |_| ("200 OK", completion("done")));
    let host = format!(
        "kind: agentmesh/v1/host\nmodels:\n  fake: {{base_url: \"http://127.0.0.1:{model}/v1\", api_key: k}}\n"
    );
    let agent = "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: Help.
model: fake/m
capabilities: {pets: \"*\"}
";
    let dir = config_dir(&[
        ("host.yaml", &host),
        ("petstore.yaml", PETSTORE),
        ("tool.yaml", &petstore_tool("http://127.0.0.1:1")),
        ("agent.yaml", agent),
    ]);
    let data = dir.path().join("data");
    run_json(dir.path(), "t/a", "go", &data, &[]);
    let request: Value = serde_json::from_str(&next(&asked).body).unwrap();
    let tools = request["tools"].as_array().unwrap();
    let params = |name: &str| {
        tools
            .iter()
            .find(|t| t["function"]["name"] == name)
            .unwrap_or_else(|| panic!("no function {name} in {tools:?}"))["function"]["parameters"]
            .clone()
    };
    // A query parameter the document says is optional is optional, with its bounds.
    let list = params("pets_list");
    assert_eq!(list["required"], json!([]), "{list}");
    assert_eq!(list["properties"]["limit"]["type"], "integer", "{list}");
    assert_eq!(list["properties"]["limit"]["maximum"], 100.0, "{list}");
    assert_eq!(
        list["properties"]["limit"]["description"],
        "How many items to return at one time (max 100)"
    );
    // A path parameter is required.
    let show = params("pets_show");
    assert_eq!(show["required"], json!(["petId"]), "{show}");
    assert_eq!(show["properties"]["petId"]["type"], "string", "{show}");
    // The request body's `$ref` to `Pet` is resolved into its properties, its `required`
    // kept.
    let create = params("pets_create");
    assert_eq!(create["required"], json!(["id", "name"]), "{create}");
    assert_eq!(create["properties"]["id"]["type"], "integer", "{create}");
    assert_eq!(create["properties"]["name"]["type"], "string", "{create}");
    assert_eq!(create["properties"]["tag"]["type"], "string", "{create}");
}

/// A small API whose document declares a header parameter and three security schemes.
const NOTES: &str = "openapi: 3.1.0
info: {title: Notes, version: '1'}
servers: [{url: 'http://notes.invalid/api'}]
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-API-Key}
    query_key: {type: apiKey, in: query, name: api_key}
    token: {type: http, scheme: bearer}
    login: {type: http, scheme: basic}
security: [{key: []}]
paths:
  /notes/{id}:
    parameters:
      - {name: id, in: path, required: true, schema: {type: integer}}
    get:
      operationId: getNote
      parameters:
        - {name: X-Trace, in: header, required: true, schema: {type: string}}
      responses:
        '200': {description: A note, content: {application/json: {schema: {type: object}}}}
    delete:
      operationId: deleteNote
      security: [{token: []}, {login: []}]
      responses:
        '204': {description: Gone}
  /search:
    get:
      operationId: search
      security: [{query_key: []}]
      parameters:
        - {name: q, in: query, required: true, schema: {type: string}}
      responses:
        '200': {description: Hits, content: {application/json: {schema: {type: array}}}}
";

/// The key, token and password of the notes API: none a `format: password` setting, each a
/// secret because it is a security scheme's credential.
const KEY: &str = "notes-key-5be1c0aa93";
const TOKEN: &str = "notes-token-77d10e2f";
const PASSWORD: &str = "notes-pw-c4a1e90b3d";

#[test]
fn security_schemes_are_filled_from_settings_and_never_shown() {
    let (port, received) = agentmesh_testkit::serve(4, |r| {
        // The API repeats what it was sent: the credentials must not reach the log.
        let sent = json!({
            "line": r.request_line,
            "key": r.header("x-api-key"),
            "auth": r.header("authorization"),
        });
        ("200 OK", sent.to_string())
    });
    let host = format!(
        "kind: agentmesh/v1/host
settings:
  t:
    notes:
      base: http://127.0.0.1:{port}/api
      key: {KEY}
      token: {TOKEN}
      password: {PASSWORD}
"
    );
    let tool = "kind: commonagents.info/v1beta2/tool
namespace: t
name: notes
description: Notes.
settings:
  type: object
  properties:
    base: {type: string}
    key: {type: string}
    token: {type: string}
    password: {type: string}
openapi:
  url: notes.yaml
  base_url: \"{settings.base}\"
  security:
    key: \"{settings.key}\"
    query_key: \"{settings.key}\"
actions:
  - {name: get, description: A note., execute: {openapi: {operation: getNote}}}
  - {name: search, description: Search., execute: {openapi: {operation: search}}}
  - name: delete
    description: Delete with a token.
    execute: {openapi: {operation: deleteNote, security: {token: \"{settings.token}\"}}}
  - name: delete_as_user
    description: Delete with a password.
    execute:
      openapi: {operation: deleteNote, security: {login: \"ops:{settings.password}\"}}
";
    let script = "responses:
  - tool_calls: [{name: notes_get, arguments: {id: 3, X-Trace: t-1}}]
  - tool_calls: [{name: notes_search, arguments: {q: milk}}]
  - tool_calls: [{name: notes_delete, arguments: {id: 3}}]
  - tool_calls: [{name: notes_delete_as_user, arguments: {id: 4}}]
  - text: done
";
    let dir = config_dir(&[
        ("host.yaml", &host),
        ("notes.yaml", NOTES),
        ("tool.yaml", tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {notes: \"*\"}\n"),
        ),
        ("script.yaml", script),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    // The document's default security (`key`, a header) and the header parameter.
    let get = next(&received);
    assert_eq!(get.request_line, "GET /api/notes/3 HTTP/1.1");
    assert_eq!(get.header("x-trace"), Some("t-1"));
    assert_eq!(get.header("x-api-key"), Some(KEY));
    // The operation's own security: a key in the query.
    let search = next(&received);
    assert_eq!(
        search.request_line,
        format!("GET /api/search?q=milk&api_key={KEY} HTTP/1.1")
    );
    assert_eq!(search.header("x-api-key"), None);
    // The first alternative the manifest gives: a bearer token, then basic.
    let delete = next(&received);
    assert_eq!(delete.request_line, "DELETE /api/notes/3 HTTP/1.1");
    assert_eq!(
        delete.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let delete = next(&received);
    // base64 of `ops:notes-pw-c4a1e90b3d`.
    assert_eq!(
        delete.header("authorization"),
        Some("Basic b3BzOm5vdGVzLXB3LWM0YTFlOTBiM2Q=")
    );
    let log = events_text(&data, &task);
    // The credential as sent (base64) is hidden as well as the password in it.
    for secret in [KEY, TOKEN, PASSWORD, "b3BzOm5vdGVzLXB3LWM0YTFlOTBiM2Q="] {
        assert!(
            !log.contains(secret),
            "the event log shows `{secret}`:\n{log}"
        );
    }
    assert!(log.contains("api_key=***"), "{log}");
    assert!(log.contains("Bearer ***"), "{log}");
    assert!(log.contains("Basic ***"), "{log}");
}

#[test]
fn failures_of_the_remote_api_are_observations_and_the_task_goes_on() {
    let (port, _received) = agentmesh_testkit::serve(3, |r| {
        if r.request_line.contains("/slow/") {
            std::thread::sleep(Duration::from_secs(3));
            ("200 OK", json!({"id": 1, "name": "late"}).to_string())
        } else if r.request_line.contains("/fail/") {
            (
                "500 Internal Server Error",
                json!({"error": "down"}).to_string(),
            )
        } else {
            ("200 OK", "{\"id\": 1, \"name\":".to_owned())
        }
    });
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: pets
description: The petstore, badly served.
openapi: {{url: petstore.yaml, operation: showPetById}}
actions:
  - name: failing
    description: Answers 500.
    execute: {{openapi: {{base_url: \"http://127.0.0.1:{port}/fail\"}}}}
  - name: slow
    description: Answers too late.
    execute: {{openapi: {{base_url: \"http://127.0.0.1:{port}/slow\", timeout: 1s}}}}
  - name: malformed
    description: Answers broken JSON.
    execute: {{openapi: {{base_url: \"http://127.0.0.1:{port}/bad\"}}}}
  - name: unreachable
    description: Nobody listens.
    execute: {{openapi: {{base_url: \"http://127.0.0.1:1\"}}}}
"
    );
    let call = |name: &str| {
        format!("  - tool_calls: [{{name: pets_{name}, arguments: {{petId: '1'}}}}]\n")
    };
    let script = format!(
        "responses:\n{}{}{}{}  - text: done\n",
        call("failing"),
        call("slow"),
        call("malformed"),
        call("unreachable")
    );
    let dir = config_dir(&[
        ("petstore.yaml", PETSTORE),
        ("tool.yaml", &tool),
        (
            "agent.yaml",
            &scripted_agent("t/a", "capabilities: {pets: \"*\"}\n"),
        ),
        ("script.yaml", &script),
    ]);
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let obs = observations(&events(&data, &task));
    let errors: Vec<&str> = obs
        .iter()
        .map(|o| o["error"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(errors.len(), 4, "{obs:?}");
    assert!(
        errors[0].contains("HTTP 500") && errors[0].contains("down"),
        "{obs:?}"
    );
    assert!(errors[1].contains("timed out"), "{obs:?}");
    assert!(errors[2].contains("not the JSON"), "{obs:?}");
    assert!(errors[3].contains("unreachable"), "{obs:?}");
}

/// `agentmesh validate` of a config dir with `files`: exit code and what it printed.
fn validate(files: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = config_dir(files);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    (code, format!("{out}{err}"))
}

/// A tool over the document at `url` calling `operation`, written so that `url` is on line 6
/// and `operation` on line 9.
fn tool_at(url: &str, operation: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: pets
description: The petstore.
openapi:
  url: {url}
actions:
  - name: show
    execute: {{openapi: {{operation: {operation}}}}}
    description: One pet.
"
    )
}

#[test]
fn validate_reports_an_unknown_operation_at_its_name() {
    let (code, out) = validate(&[
        ("petstore.yaml", PETSTORE),
        ("tool.yaml", &tool_at("petstore.yaml", "showPetByID")),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:9:36: error: action `show`: `petstore.yaml` has no operation `showPetByID`; did you mean `showPetById`?"),
        "{out}"
    );
}

#[test]
fn validate_reports_a_document_that_does_not_parse_at_its_url() {
    let (code, out) = validate(&[
        ("broken.json", "{\"openapi\": \"3.1.0\", \"paths\": [\n"),
        ("tool.yaml", &tool_at("broken.json", "listPets")),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "tool.yaml:6:8: error: action `show`: the OpenAPI document `broken.json` is not valid JSON"
        ),
        "{out}"
    );
    let (code, out) = validate(&[
        ("swagger.yaml", "swagger: '2.0'\npaths: {}\n"),
        ("tool.yaml", &tool_at("swagger.yaml", "listPets")),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:6:8:") && out.contains("is not an OpenAPI 3 document"),
        "{out}"
    );
}

#[test]
fn validate_reports_an_unreachable_or_failing_document_url() {
    let (code, out) = validate(&[(
        "tool.yaml",
        &tool_at("http://127.0.0.1:1/petstore.yaml", "listPets"),
    )]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:6:8: error: action `show`: the OpenAPI document `http://127.0.0.1:1/petstore.yaml` is unreachable"),
        "{out}"
    );
    let (port, _) = agentmesh_testkit::serve(1, |_| ("500 Internal Server Error", "{}".into()));
    let url = format!("http://127.0.0.1:{port}/petstore.yaml");
    let (code, out) = validate(&[("tool.yaml", &tool_at(&url, "listPets"))]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:6:8:") && out.contains("answered HTTP 500"),
        "{out}"
    );
}

#[test]
fn validate_loads_a_document_served_over_http() {
    let (port, received) = agentmesh_testkit::serve(1, |_| ("200 OK", PETSTORE.to_owned()));
    let url = format!("http://127.0.0.1:{port}/petstore.yaml");
    let (code, out) = validate(&[("tool.yaml", &tool_at(&url, "showPetById"))]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ok: 0 agents, 1 tools"), "{out}");
    assert_eq!(next(&received).request_line, "GET /petstore.yaml HTTP/1.1");
}

#[test]
fn validate_refuses_recursive_schemas_and_both_names_of_the_operation() {
    let cyclic = "openapi: 3.0.3
info: {title: Tree, version: '1'}
servers: [{url: 'http://tree.invalid'}]
paths:
  /nodes:
    post:
      operationId: addNode
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: '#/components/schemas/Node'}}}
      responses: {'201': {description: Added}}
components:
  schemas:
    Node:
      type: object
      properties:
        children: {type: array, items: {$ref: '#/components/schemas/Node'}}
";
    let (code, out) = validate(&[
        ("tree.yaml", cyclic),
        ("tool.yaml", &tool_at("tree.yaml", "addNode")),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:9:36:") && out.contains("refers to itself"),
        "{out}"
    );
    let both = tool_at("petstore.yaml", "listPets").replace(
        "{operation: listPets}",
        "{operation: listPets, operation_id: listPets}",
    );
    let (code, out) = validate(&[("petstore.yaml", PETSTORE), ("tool.yaml", &both)]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("tool.yaml:9:")
            && out.contains("`operation_id` is another name of `operation`"),
        "{out}"
    );
}

#[test]
fn an_auth_provider_fills_a_bearer_scheme_and_its_token_is_never_shown() {
    let (port, received) = agentmesh_testkit::serve(1, |r| {
        let sent = json!({"line": r.request_line, "auth": r.header("authorization")});
        ("200 OK", sent.to_string())
    });
    let host = format!(
        "kind: agentmesh/v1/host
auth:
  notes: {{type: bearer, token: {TOKEN}}}
"
    );
    let tool = |provider: &str| {
        format!(
            "kind: commonagents.info/v1beta2/tool
namespace: t
name: notes
description: Notes.
openapi:
  url: notes.yaml
  base_url: \"http://127.0.0.1:{port}/api\"
actions:
  - name: delete
    description: Delete with the provider's token.
    execute: {{openapi: {{operation: deleteNote, security: {{token: \"{{auth.{provider}()}}\"}}}}}}
"
        )
    };
    let script = "responses:
  - tool_calls: [{name: notes, arguments: {id: 3}}]
  - text: done
";
    let files = |provider: &str| {
        config_dir(&[
            ("host.yaml", host.as_str()),
            ("notes.yaml", NOTES),
            ("tool.yaml", &tool(provider)),
            (
                "agent.yaml",
                &scripted_agent("t/a", "capabilities: {notes: \"*\"}\n"),
            ),
            ("script.yaml", script),
        ])
    };
    // A provider the host config does not have is refused where it is named.
    let wrong = files("note");
    let (code, out, err) = agentmesh(&["validate", wrong.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("tool.yaml:11:68: error: unknown auth provider `note`"),
        "{said}"
    );

    let dir = files("notes");
    let data = dir.path().join("data");
    let task = run_json(dir.path(), "t/a", "go", &data, &[]);
    let delete = next(&received);
    assert_eq!(delete.request_line, "DELETE /api/notes/3 HTTP/1.1");
    // The provider's header value is the whole `Authorization` (not `Bearer Bearer …`).
    assert_eq!(
        delete.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let log = events_text(&data, &task);
    assert!(
        !log.contains(TOKEN),
        "the event log shows the token:\n{log}"
    );
    assert!(log.contains("Bearer ***"), "{log}");
}

#[test]
fn a_binding_may_name_a_parameter_the_operation_declares() {
    let (port, received) = agentmesh_testkit::serve(1, |_| ("200 OK", "{}".to_owned()));
    let agent = |name: &str| {
        scripted_agent(
            "t/a",
            &format!("capabilities:\n  pets:\n    bindings:\n      {name}: \"'42'\"\n"),
        )
    };
    let script = "responses:
  - tool_calls: [{name: pets_show, arguments: {}}]
  - text: done
";
    let files = |name: &str| {
        config_dir(&[
            ("petstore.yaml", PETSTORE),
            (
                "tool.yaml",
                &petstore_tool(&format!("http://127.0.0.1:{port}")),
            ),
            ("agent.yaml", &agent(name)),
            ("script.yaml", script),
        ])
    };
    // A name neither the manifest nor the document declares is refused where it is bound.
    let wrong = files("pet_id");
    let (code, out, err) = agentmesh(&["validate", wrong.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains(
            "agent.yaml:10:15: error: binding `pet_id` is not a parameter of tool `t/pets`; did you mean `petId`?"
        ),
        "{said}"
    );

    // `petId` is the path parameter of `showPetById`: bound, it is filled in (and sealed).
    let dir = files("petId");
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let data = dir.path().join("data");
    run_json(dir.path(), "t/a", "go", &data, &[]);
    assert_eq!(next(&received).request_line, "GET /pets/42 HTTP/1.1");
}
