//! The OpenAPI 3.1 description, assembled from the handlers' own annotations.

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The contract's error body (schema only; `ApiError` writes it).
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
    tags((name = "auth", description = "DID challenge-response login"),
         (name = "identity", description = "DIDs and keys"),
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
