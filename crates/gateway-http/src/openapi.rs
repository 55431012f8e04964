//! The OpenAPI 3.1 description, assembled from the handlers' own annotations.

use serde::Serialize;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

/// The error body (schema only; `ApiError` writes it).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Human-readable message.
    pub error: String,
    /// Machine code, e.g. `BAD_REQUEST`.
    pub code: String,
    /// Code-specific details; `{}` when there is nothing to add.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

/// The document's fixed parts; paths are added by the routers.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "Cooperative gateway", description = "HTTP and WebSocket gateway for DID login, mutual credit, governance, cooperatives, compute and notifications."),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth),
    tags((name = "auth", description = "DID challenge-response login: a nonce to sign, then a token"),
         (name = "identity", description = "The caller's DID and key; resolution of did:key and did:icn"),
         (name = "ledger", description = "Mutual-credit payments, balances, history, batches, exchange rates and conversions"),
         (name = "coops", description = "Cooperatives, their members, roles, credit limits and settings"),
         (name = "governance", description = "Domains, proposals, votes, delegations, closes and signed decision receipts"),
         (name = "trust", description = "Trust edges between DIDs and the scores computed from them"),
         (name = "compute", description = "CCL tasks: submission, the executor protocol, results and cancellation"),
         (name = "notifications", description = "The caller's notifications in the token's cooperative"),
         (name = "log", description = "The coop's verifiable log (C2SP tlog-tiles): signed checkpoints, tiles, entry bundles and proofs"),
         (name = "operations", description = "Health and readiness")),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// Paths whose parameters name no stored record, so they never answer 404: a score or edge list
/// is computed for any well-formed DID, and did:key / did:icn resolve without a lookup.
const NEVER_NOT_FOUND: [&str; 4] =
    ["/v1/trust/{did}/score", "/trust/score/{did}", "/v1/trust/{did}/edges", "/v1/identity/resolve/{did}"];

/// Paths that answer without touching the store (liveness, key resolution, challenges, which
/// live in memory), so they never answer 503.
const NO_STORE: [&str; 4] = ["/healthz", "/v1/health", "/v1/identity/resolve/{did}", "/v1/auth/challenge"];

/// The health and readiness probes: no token and no rate limit.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/v1/health"];

/// Completes the document with the answers every route of a kind can give, so that no route
/// forgets one: a route with a token answers 401, 403 and 429 (the per-DID limit), one without
/// (but the probes) 429 (the IP layer); a route with
/// parameters or a body 400; a route with a body 413 (over 1 MiB); a route whose path names a
/// record 404; a route that reads or writes the store 503. Each such answer carries the error
/// body's schema. Routes keep their own, more precise descriptions where they give one; any
/// response still without a description gets the status's standard text.
pub fn complete(doc: &mut utoipa::openapi::OpenApi) {
    complete_paths(doc);
    // The aliases copy their `/v1` operation as completed, then get what their own path adds.
    add_aliases(doc, crate::SHORT_FAMILY);
    complete_paths(doc);
}

fn complete_paths(doc: &mut utoipa::openapi::OpenApi) {
    for (path, item) in &mut doc.paths.paths {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            complete_operation(path, operation);
        }
    }
}

/// An operation of the specification's short family: its unversioned path, served by the
/// handler of a `/v1` operation.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    /// The HTTP method, lower case (`get`, `post`).
    pub method: &'static str,
    /// The short path, e.g. `/ledger/transaction`.
    pub path: &'static str,
    /// The `/v1` path whose handler serves it.
    pub of: &'static str,
    /// How the alias differs (the cooperative is the token's, a default), or `""`.
    pub note: &'static str,
}

/// Documents each alias as a copy of the `/v1` operation it is served by: same body, answers
/// and errors; a description that starts by naming that operation and the difference; without
/// the path parameters the short path does not have; its own operation id.
pub fn add_aliases(doc: &mut utoipa::openapi::OpenApi, aliases: &[Alias]) {
    use utoipa::openapi::HttpMethod;
    for alias in aliases {
        let method = match alias.method {
            "get" => HttpMethod::Get,
            "post" => HttpMethod::Post,
            "put" => HttpMethod::Put,
            "delete" => HttpMethod::Delete,
            other => panic!("alias {} has an unsupported method {other}", alias.path),
        };
        let Some(mut operation) = doc.paths.get_path_operation(alias.of, method.clone()).cloned() else {
            panic!("alias {} {} names no operation {}", alias.method, alias.path, alias.of);
        };
        let upper = alias.method.to_ascii_uppercase();
        let mut description = format!("Alias of `{upper} {}`", alias.of);
        if !alias.note.is_empty() {
            description.push_str(": ");
            description.push_str(alias.note);
        }
        description.push('.');
        if let Some(own) = operation.description.take().filter(|d| !d.is_empty()) {
            description.push_str("\n\n");
            description.push_str(&own);
        }
        operation.description = Some(description);
        operation.operation_id = operation.operation_id.map(|id| format!("short_{id}"));
        if let Some(parameters) = operation.parameters.as_mut() {
            parameters.retain(|p| {
                !matches!(p.parameter_in, ParameterIn::Path) || alias.path.contains(&format!("{{{}}}", p.name))
            });
        }
        let item = doc.paths.paths.entry(alias.path.to_owned()).or_default();
        let slot = match method {
            HttpMethod::Get => &mut item.get,
            HttpMethod::Post => &mut item.post,
            HttpMethod::Put => &mut item.put,
            _ => &mut item.delete,
        };
        *slot = Some(operation);
    }
}

fn complete_operation(path: &str, operation: &mut Operation) {
    let parameters = operation.parameters.as_deref().unwrap_or_default();
    let has_path_parameter = parameters.iter().any(|p| matches!(p.parameter_in, ParameterIn::Path));
    let protected = operation.security.as_ref().is_some_and(|s| !s.is_empty());
    let has_body = operation.request_body.is_some();
    let upgrade = operation.responses.responses.contains_key("101");
    let mut add = |status: &str, description: &str| {
        operation.responses.responses.entry(status.to_owned()).or_insert_with(|| error_response(description));
    };
    if protected {
        add("401", "No bearer token, or a malformed, expired, revoked or foreign one");
        add("403", "The token lacks the scope, is for another cooperative, or its subject is no longer a member");
        add("429", "The caller's per-DID request limit (Retry-After says when to come back)");
    }
    if !protected && !PROBES.contains(&path) {
        add("429", "Too many requests from this address (the IP layer; Retry-After says when to come back)");
    }
    if !parameters.is_empty() || has_body {
        add("400", "A parameter or body field is invalid; `details.fields` names it");
    }
    if has_body {
        add("413", "The body is over 1 MiB");
    }
    if has_path_parameter && !upgrade && !NEVER_NOT_FOUND.contains(&path) {
        add("404", "What the path names does not exist (or is not visible to the caller)");
    }
    if !NO_STORE.contains(&path) {
        add("503", "The store is unavailable or the gateway is shutting down; retry later");
    }
    for (status, response) in &mut operation.responses.responses {
        if let RefOr::T(response) = response
            && response.description.is_empty()
        {
            response.description = standard_text(status).to_owned();
        }
    }
}

fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    let body = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
    RefOr::T(ResponseBuilder::new().description(description).content("application/json", body).build())
}

fn standard_text(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "204" => "No content",
        "400" => "Bad request",
        "401" => "Not authenticated",
        "403" => "Forbidden",
        "404" => "Not found",
        "409" => "Conflict with the current state",
        "429" => "Too many requests",
        "503" => "Unavailable",
        _ => "See the status",
    }
}
