//! The JSON API's OpenAPI 3.1 document, served at `/v1/openapi.json`
//! without a token: it describes routes and shapes and holds no data.
//!
//! Must never: name a route the router does not serve (the `http` test
//! asks every documented route and method, and each must answer 401, not
//! 404 or 405, without a token).

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::MAX_BODY;
use super::routes::{MAX_BUDGET, MAX_LIMIT};
use crate::recall::MAX_K;

pub(crate) async fn serve() -> Response {
    let mut r = document().to_string().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn body(name: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema(name)}}})
}

fn answer(description: &str, name: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema(name)}}})
}

fn problem(description: &str) -> Value {
    json!({"description": description, "content": {"application/problem+json": {"schema": schema("Problem")}}})
}

fn query(name: &str, description: &str, required: bool, ty: Value) -> Value {
    json!({"name": name, "in": "query", "required": required, "description": description, "schema": ty})
}

fn string() -> Value {
    json!({"type": "string"})
}

/// The time filters of a recall.
fn time_params() -> Vec<Value> {
    vec![
        query(
            "since",
            "only memories whose valid time starts at/after this (RFC 3339, date, or offset like -7d)",
            false,
            string(),
        ),
        query(
            "until",
            "only memories whose valid time starts at/before this",
            false,
            string(),
        ),
        query(
            "valid_at",
            "what was true then: superseded and ended memories drop out",
            false,
            string(),
        ),
        query(
            "known_at",
            "answer with what was on record then",
            false,
            string(),
        ),
    ]
}

/// Errors every authenticated route may answer.
fn errors(mut responses: Value, extra: &[(&str, &str)]) -> Value {
    responses["400"] = problem("bad input: the detail names the field");
    responses["401"] = problem("no token, or an unknown, expired or revoked one");
    responses["403"] = problem("refused: a cross-site request, or a rule (code names it)");
    for (status, why) in extra {
        responses[*status] = problem(why);
    }
    responses
}

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "description": "memory id (UUID)", "schema": string()})
}

/// The whole document.
pub(crate) fn document() -> Value {
    let mut search_params = vec![
        query("q", "the query", true, string()),
        query(
            "k",
            "how many hits (default 10)",
            false,
            json!({"type": "integer", "minimum": 1, "maximum": MAX_K}),
        ),
        query(
            "mode",
            "hybrid (default), lexical, semantic or fast",
            false,
            json!({"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"]}),
        ),
    ];
    search_params.extend(time_params());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "amos",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!(
                "amos's JSON API (docs/http.md): an agent's memories over HTTP. Every route but \
                 this document needs `Authorization: Bearer TOKEN` (`amos agent token create \
                 AGENT`); the token is its agent, and a memory it cannot see answers exactly \
                 as a missing one (404). Errors are RFC 9457 problem details. Bodies are at \
                 most {MAX_BODY} bytes. MCP over Streamable HTTP is at /mcp, with the same tokens."
            )
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths(search_params),
        "components": components(),
    })
}

/// The routes.
fn paths(search_params: Vec<Value>) -> Value {
    let not_found = (
        "404",
        "no such memory, or one this token cannot see (the same answer)",
    );
    let too_large = ("413", "the body is larger than the limit; nothing was done");
    let media = ("415", "the body is not JSON");
    json!({
        "/v1/openapi.json": {"get": {
            "summary": "This document (no token needed)",
            "security": [],
            "responses": {"200": {"description": "the OpenAPI document"}}
        }},
        "/v1/status": {"get": {
            "summary": "The node and the token's agent (no memory data)",
            "responses": errors(json!({"200": answer("the node", "Status")}), &[])
        }},
        "/v1/memories": {
            "post": {
                "summary": "Store a new memory owned by the token's agent (amos add)",
                "requestBody": body("NewMemory"),
                "responses": errors(json!({"201": answer("stored; Location names it", "Added")}), &[too_large, media])
            },
            "get": {
                "summary": "Memories the agent sees, newest first (amos list)",
                "parameters": [
                    query("type", "only this type", false, string()),
                    query("limit", "how many (default 100)", false, json!({"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}))
                ],
                "responses": errors(json!({"200": answer("the memories", "MemoryList")}), &[])
            }
        },
        "/v1/memories/{id}": {
            "parameters": [id_param()],
            "get": {
                "summary": "One memory (amos get)",
                "responses": errors(json!({"200": answer("the memory", "Memory")}), &[not_found])
            },
            "patch": {
                "summary": "Change its text, valid time or both (amos update)",
                "requestBody": body("Update"),
                "responses": errors(json!({"200": answer("updated", "Id")}), &[not_found, too_large, media])
            },
            "delete": {
                "summary": "Forget it everywhere (amos forget; owner only)",
                "responses": errors(json!({"204": {"description": "forgotten"}}), &[not_found])
            }
        },
        "/v1/memories/{id}/share": {
            "parameters": [id_param()],
            "post": {
                "summary": "Let a scope see it (amos share; owner only)",
                "requestBody": body("ScopeBody"),
                "responses": errors(json!({"200": answer("its visibility now", "Visibility")}), &[not_found, too_large, media])
            }
        },
        "/v1/memories/{id}/unshare": {
            "parameters": [id_param()],
            "post": {
                "summary": "Stop a scope from seeing it (amos unshare; owner only)",
                "requestBody": body("ScopeBody"),
                "responses": errors(json!({"200": answer("its visibility now", "Visibility")}), &[not_found, too_large, media])
            }
        },
        "/v1/memories/{id}/links": {
            "parameters": [id_param()],
            "get": {
                "summary": "Its links whose other end the agent sees",
                "responses": errors(json!({"200": answer("the links", "Links")}), &[not_found])
            }
        },
        "/v1/links": {"post": {
            "summary": "Link two memories the agent sees (amos link)",
            "requestBody": body("LinkBody"),
            "responses": errors(json!({"201": answer("linked", "Linked")}), &[not_found, too_large, media])
        }},
        "/v1/feedback": {"post": {
            "summary": "Say whether recalled memories helped (amos feedback)",
            "requestBody": body("FeedbackBody"),
            "responses": errors(json!({"200": answer("what changed", "Feedback")}), &[not_found, too_large, media])
        }},
        "/v1/search": {"get": {
            "summary": "Ranked recall over the memories the agent sees (amos search)",
            "parameters": search_params,
            "responses": errors(json!({"200": answer("hits, best first", "Hits")}), &[])
        }},
        "/v1/pack": {"post": {
            "summary": "The best memories for a task within a token budget (amos pack)",
            "requestBody": body("PackBody"),
            "responses": errors(json!({"200": answer("the pack", "Pack")}), &[too_large, media])
        }},
        "/v1/timeline": {"get": {
            "summary": "The agent's memories in the order they became true (amos timeline)",
            "parameters": [
                query("since", "events at/after this", false, string()),
                query("until", "events at/before this", false, string()),
                query("scope", "only memories shared with this scope (private, team:ID, ...)", false, string()),
                query("limit", "most events (default 100)", false, json!({"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}))
            ],
            "responses": errors(json!({"200": answer("the events", "Timeline")}), &[])
        }},
        "/v1/contexts": {"get": {
            "summary": "The agent's parked working contexts, newest first, without their text",
            "responses": errors(json!({"200": answer("the contexts", "Contexts")}), &[])
        }},
        "/v1/contexts/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": true, "description": "the context's name ([A-Za-z0-9._-], at most 56)", "schema": {"type": "string"}}],
            "get": {
                "summary": "Bring back the agent's parked context (memory_reload_context)",
                "responses": errors(json!({"200": answer("the context", "Context")}), &[("404", "no parked context of that name (another agent's reads the same)")])
            },
            "put": {
                "summary": "Park the agent's working context under a name, replacing the last (memory_offload_context)",
                "requestBody": body("ContextBody"),
                "responses": errors(json!({"200": answer("parked", "Context")}), &[too_large, media])
            }
        },
        "/v1/changes": {"get": {
            "summary": "What changed for the agent since a time: added, edited, superseded, revoked (memory_changes_since)",
            "parameters": [
                query("since", "RFC 3339, date, or offset like -1d", true, json!({"type": "string"})),
                query("limit", "most changes (default 100)", false, json!({"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}))
            ],
            "responses": errors(json!({"200": answer("the changes, oldest first", "Changes")}), &[])
        }},
        "/v1/consolidation": {"get": {
            "summary": "Dry run: which memories the agent sees consolidation would merge (memory_consolidate)",
            "responses": errors(json!({"200": answer("the plan", "Consolidation")}), &[])
        }}
    })
}

/// The security scheme and the shapes.
fn components() -> Value {
    let mut c = base_components();
    if let (Some(all), Value::Object(more)) = (c["schemas"].as_object_mut(), context_schemas()) {
        all.extend(more);
    }
    c
}

/// [`components`] but the context routes' shapes.
fn base_components() -> Value {
    json!({
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "an agent token: amos agent token create AGENT"}},
        "schemas": {
            "Problem": {"type": "object", "description": "RFC 9457 problem details", "properties": {
                "type": string(), "title": string(), "status": {"type": "integer"},
                "detail": {"type": "string", "description": "one line: what was wrong"},
                "code": {"type": "string", "description": "stable: bad_input, bad_token, no_such_memory, not_owner, payload_too_large, cross_site, ..."}
            }},
            "Status": {"type": "object", "properties": {
                "node_id": string(), "name": string(), "version": string(), "api": string(),
                "agent": {"type": "string", "description": "the token's agent"},
                "token": {"type": "string", "description": "the token's public id"}
            }},
            "NewMemory": {"type": "object", "required": ["content"], "additionalProperties": false, "properties": {
                "content": {"type": "string", "description": "the memory text (at most 64 KiB)"},
                "type": {"type": "string", "description": "note (default), fact, decision, procedure, lesson, preference, ..."},
                "share": {"type": "array", "items": string(), "description": "scopes that may see it: team:ID, project:ID, agent:ID, global (default: private)"},
                "tags": {"type": "array", "items": string()},
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
                "pin": {"type": "boolean"},
                "expires": {"type": "string", "description": "a lifetime (30d) or an RFC 3339 time"},
                "valid_from": string(), "valid_to": string(),
                "supersedes": {"type": "string", "description": "id of the memory this one replaces"}
            }},
            "Added": {"type": "object", "properties": {
                "id": string(),
                "similar": {"type": "array", "description": "up to 3 memories the agent sees that say nearly the same", "items": {"type": "object"}}
            }},
            "Id": {"type": "object", "properties": {"id": string()}},
            "Memory": {"type": "object", "properties": {
                "id": string(), "content": string(), "owner": string(), "type": string(),
                "visibility": {"type": "array", "items": string()}, "tags": {"type": "array", "items": string()},
                "importance": {"type": "number"}, "confidence": {"type": "number"}, "pinned": {"type": "boolean"},
                "created": string(), "updated": string(), "expires": {"type": ["string", "null"]},
                "origin": string(), "archived": {"type": "boolean"}, "valid_from": string(),
                "valid_to": {"type": ["string", "null"]}, "supersedes": {"type": ["string", "null"]}
            }},
            "MemoryList": {"type": "object", "properties": {"memories": {"type": "array", "items": schema("Memory")}}},
            "Hit": {"allOf": [schema("Memory"), {"type": "object", "properties": {
                "score": {"type": "number"}, "relevance": {"type": "number"}, "explain": {"type": "object"}
            }}]},
            "Hits": {"type": "object", "properties": {"hits": {"type": "array", "items": schema("Hit")}}},
            "Update": {"type": "object", "additionalProperties": false, "description": "at least one of the three", "properties": {
                "content": string(), "valid_from": string(), "valid_to": string()
            }},
            "ScopeBody": {"type": "object", "required": ["scope"], "additionalProperties": false, "properties": {
                "scope": {"type": "string", "description": "team:ID, project:ID, agent:ID or global"}
            }},
            "Visibility": {"type": "object", "properties": {"id": string(), "visibility": {"type": "array", "items": string()}}},
            "Links": {"type": "object", "properties": {"links": {"type": "array", "items": {"type": "object", "properties": {
                "outgoing": {"type": "boolean"}, "relation": string(), "weight": {"type": "number"}, "other": schema("Memory")
            }}}}},
            "LinkBody": {"type": "object", "required": ["a", "b"], "additionalProperties": false, "properties": {
                "a": string(), "b": string(),
                "relation": {"type": "string", "description": "related (default), supports, contradicts, ..."},
                "weight": {"type": "number", "minimum": 0, "maximum": 1}
            }},
            "Linked": {"type": "object", "properties": {"from": string(), "to": string()}},
            "FeedbackBody": {"type": "object", "required": ["ids", "helpful"], "additionalProperties": false, "properties": {
                "ids": {"type": "array", "items": string(), "minItems": 1, "maxItems": MAX_LIMIT},
                "helpful": {"type": "boolean"}
            }},
            "Feedback": {"type": "object", "properties": {
                "updated": {"type": "integer"}, "links": {"type": "integer"}, "associations": {"type": "integer"}
            }},
            "PackBody": {"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "query": string(),
                "budget": {"type": "integer", "minimum": 1, "maximum": MAX_BUDGET, "description": format!("tokens (default {})", crate::recall::DEFAULT_BUDGET)},
                "report": {"type": "boolean", "description": "explain each include/exclude decision"},
                "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic", "fast"]},
                "since": string(), "until": string(), "valid_at": string(), "known_at": string()
            }},
            "Pack": {"type": "object", "properties": {
                "items": {"type": "array", "items": schema("Hit")}, "tokens": {"type": "integer"},
                "budget": {"type": "integer"}, "reserved": {"type": "integer"}, "conflicts": {"type": "array"},
                "report": {"type": "array"}
            }},
            "Timeline": {"type": "object", "properties": {"events": {"type": "array", "items": {"type": "object", "properties": {
                "at_ms": {"type": "integer"}, "event": string(), "memory": string(), "owner": string(),
                "text": string(), "by": string()
            }}}}}
        }
    })
}

/// The shapes of the context routes.
fn context_schemas() -> Value {
    json!({
            "ContextBody": {"type": "object", "required": ["content"], "additionalProperties": false, "properties": {
                "content": {"type": "string", "description": "the context (at most 32 KiB)"},
                "ttl": {"type": "string", "description": "lifetime (12h, 7d; at most 90d) or RFC 3339 time (default 7d)"}
            }},
            "Context": {"type": "object", "properties": {
                "id": {"type": "string"}, "name": {"type": "string"}, "content": {"type": "string"},
                "parked": {"type": "string"}, "expires": {"type": "string"}, "bytes": {"type": "integer"}
            }},
            "Contexts": {"type": "object", "properties": {"contexts": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "id": {"type": "string"}, "parked": {"type": "string"},
                "expires": {"type": "string"}, "bytes": {"type": "integer"}
            }}}}},
            "Changes": {"type": "object", "properties": {
                "since": {"type": "string"}, "until": {"type": "string"}, "truncated": {"type": "boolean"},
                "changes": {"type": "array", "items": {"type": "object", "properties": {
                    "kind": {"type": "string", "enum": ["added", "edited", "superseded", "revoked"]}, "at": {"type": "string"},
                    "id": {"type": "string"}, "memory": schema("Memory"), "by": {"type": "string"}
                }}}
            }},
            "Consolidation": {"type": "object", "description": "what amos consolidate would do among the memories the agent sees; nothing is changed"}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` names a schema the document defines.
    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut refs = 0;
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &part[..part.find('"').unwrap()];
            assert!(schemas.contains_key(name), "{name} is not defined");
            refs += 1;
        }
        assert!(refs > 20, "{refs}");
    }
}
