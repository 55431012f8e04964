//! Route handlers, one module per area. Each handler carries its OpenAPI description
//! (`#[utoipa::path]`), and its request and response DTOs live beside it: domain types are not
//! wire types.

pub mod auth;
pub mod common;
pub mod compute;
pub mod coops;
pub mod governance;
pub mod health;
pub mod identity;
pub mod ledger;
pub mod notifications;
pub mod trust;
