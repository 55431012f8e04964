//! The treasurer's export (INTERFACE.md §13): `GET /v1/ledger/{coop}/export`, the coop's books as a
//! Beancount file, an hledger journal or a CSV table, streamed from the coop's log as it is
//! written (`gateway_domain::export`).
//!
//! An admin exports the whole coop or any account (`member=`); a member only `member=<own
//! DID>`. The parameters are checked (400 naming the field) and the log's beginning is read
//! before the answer starts, so that those refusals are ordinary error answers; a failure while
//! streaming cuts the answer short (the client sees an incomplete body, never a complete-looking
//! file: Beancount and hledger exports end with an `End of the export` comment).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use gateway_core::{Error, Membership, Role};
use gateway_domain::export::{Day, Export, ExportRequest, Format, StoredLog};
use gateway_domain::ledger::is_system;
use serde::Deserialize;

use crate::caller::CoopCaller;
use crate::caller::scopes::LedgerRead;
use crate::error::ApiResult;
use crate::extract::Query;
use crate::routes::common;
use crate::state::AppState;

/// The export's parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// `beancount`, `hledger` or `csv`.
    pub format: String,
    /// The period's first day, `YYYY-MM-DD` (UTC, inclusive) [default: the log's beginning].
    pub from: Option<String>,
    /// The day after the period, `YYYY-MM-DD` (UTC, exclusive) [default: now].
    pub to: Option<String>,
    /// Only this account's transactions: a member's DID, or the coop's treasury or exchange
    /// account (admins). Members must give their own DID.
    pub member: Option<String>,
}

fn day(field: &str, text: Option<&str>) -> ApiResult<Option<Day>> {
    text.map(|text| {
        Day::parse(text).ok_or_else(|| {
            Error::bad_request_field(field, format!("{field} must be a date YYYY-MM-DD (UTC), not '{text}'")).into()
        })
    })
    .transpose()
}

/// The coop's books for a period, as Beancount (`bean-check` passes), hledger (`hledger check`
/// passes) or CSV: every payment, batch item and conversion of the period in commit order with
/// its `id`, `seq` and `log_index`, exact amounts, and (Beancount, hledger) one account per
/// member, opening balances and closing `balance` assertions. Streamed as it is written.
#[utoipa::path(get, path = "/v1/ledger/{coop}/export", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path, description = "Cooperative id"), ExportQuery),
    responses((status = 200, description = "The export, as an attachment (`Content-Disposition`); its naming rules are in \
docs/API.md, \"Treasurer export\"",
               headers(("Content-Disposition" = String, description = "`attachment; filename=\"<coop>-<from>-<to>.<ext>\"`")),
               content((String = "text/plain"), (String = "text/csv"))),
              (status = 400, description = "An invalid `format`, `from`, `to` or `member` (`details.fields` names it)",
               body = crate::openapi::ErrorBody),
              (status = 403, description = "A member asked for the whole coop or another account", body = crate::openapi::ErrorBody),
              (status = 404, description = "No such cooperative, or it has no log", body = crate::openapi::ErrorBody),
              (status = 503, description = "The coop's log cannot be read yet (no signed checkpoint for a coop whose log \
began with a snapshot, or its first entries not copied yet)", body = crate::openapi::ErrorBody)))]
pub async fn export(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerRead>,
    Query(query): Query<ExportQuery>,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let format = Format::parse(&query.format).ok_or_else(|| {
        Error::bad_request_field("format", format!("format must be beancount, hledger or csv, not '{}'", query.format))
    })?;
    let from = day("from", query.from.as_deref())?;
    let to = day("to", query.to.as_deref())?;
    let member = match query.member.as_deref() {
        Some(text) if is_system(&coop, text) => Some(text.to_owned()),
        Some(text) => Some(common::did("member", text)?.into_string()),
        None => None,
    };
    let request = ExportRequest { coop: coop.clone(), format, from, to, member, now: state.clock.now_unix_secs() };
    request.validate()?;
    // An admin exports anything; a member only their own account. The role is read from the
    // store, not from the token's scopes: an admin's token narrowed to `ledger:read` is still
    // an admin's.
    let membership = state.auth.policy().membership().membership(&coop, &caller.did).await?;
    let admin = matches!(membership, Membership::Member(Role::Admin));
    if !admin && request.member.as_deref() != Some(caller.did.as_str()) {
        return Err(Error::denied(
            "admin_only",
            "only an admin exports the whole coop or another account; a member exports member=<their own DID>",
        )
        .into());
    }
    state.coops.get(&coop).await?;
    let source = Arc::new(StoredLog::open(state.log.reads(), &coop).await?);
    let export = Export::open(source, request).await?;
    let disposition = format!("attachment; filename=\"{}\"", export.filename());
    let chunks = export.stream();
    let body = futures_util::stream::unfold(chunks, |mut chunks| async move {
        let item = chunks.recv().await?;
        Some((item.map(bytes::Bytes::from).map_err(|e| std::io::Error::other(e.to_string())), chunks))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}
