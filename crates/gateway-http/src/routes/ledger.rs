//! Ledger routes of both families: payments, balances, history, batches, conversions, oracle
//! rates. Handlers check the token, scope, cooperative and payer in the interface's order, take
//! a velocity permit for payment-creating requests, and call the domain.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use gateway_core::{Amount, CoopId, Did, Error};
use gateway_domain::ledger::{
    AccountBalances, BatchItemResult, ConversionRequest, Idempotency, PaymentRequest, Replay, is_system,
};
use gateway_domain::ports::{HistoryQuery, QuoteRecord, RateRecord, TransactionRecord};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::caller::scopes::{LedgerRead, LedgerWrite, OracleRead, OracleWrite};
use crate::caller::{Caller, CoopCaller, Family};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, JsonBytes, Path, Query, parse_json};
use crate::routes::common::{self, PageQuery, idempotency, payment_amount, replayed};
use crate::signing::Signature;
use crate::state::AppState;
use gateway_core::RequestSignature;

/// A payment (both families; `description` is the short family's memo).
#[derive(Debug, Deserialize, ToSchema)]
pub struct PaymentBody {
    /// Payer: must be the token's DID (required on the /v1 route).
    pub from: Option<String>,
    /// Recipient DID (a member of the coop).
    pub to: String,
    /// Positive, at most 6 decimals, at most 1e12.
    #[schema(value_type = f64)]
    pub amount: Amount,
    /// Currency; the coop's default when absent.
    pub currency: Option<String>,
    /// Free text.
    pub memo: Option<String>,
    /// Free text (short family's name for `memo`).
    pub description: Option<String>,
}

/// A recorded transaction: a payment, or a conversion with its conversion fields.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TransactionDto {
    /// Id.
    pub id: String,
    /// `payment` or `conversion`.
    pub kind: String,
    /// Payer account.
    pub from: String,
    /// Payee account.
    pub to: String,
    /// Debited amount.
    #[schema(value_type = f64)]
    pub amount: Amount,
    /// Currency of `amount`.
    pub currency: String,
    /// Free text.
    pub memo: Option<String>,
    /// Unix seconds.
    pub timestamp: u64,
    /// Conversions: currency credited to the payee.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub to_currency: Option<String>,
    /// Conversions: the rate applied (target units per source unit).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>, nullable = false)]
    pub rate: Option<Amount>,
    /// Conversions: `amount × rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>, nullable = false)]
    pub gross_target_amount: Option<Amount>,
    /// Conversions: the fee kept by the coop's exchange account.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>, nullable = false)]
    pub fee_amount: Option<Amount>,
    /// Conversions: the amount credited to the payee.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>, nullable = false)]
    pub net_target_amount: Option<Amount>,
    /// Batch items: the id shared by the payments of one `POST /payments/batch` (absent for a
    /// payment made on its own, a conversion and a budget payout).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub batch_id: Option<String>,
    /// The signature of the request that made it, when it was signed (INTERFACE.md §11): evidence
    /// anyone can verify offline with `gatewayctl verify-request`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub request_signature: Option<crate::routes::common::RequestSignatureDto>,
}

impl From<&TransactionRecord> for TransactionDto {
    fn from(record: &TransactionRecord) -> Self {
        let leg = record.conversion.as_ref();
        Self {
            id: record.id.clone(),
            kind: record.kind.as_str().to_owned(),
            from: record.from.clone(),
            to: record.to.clone(),
            amount: record.amount,
            currency: record.currency.to_string(),
            memo: record.memo.clone(),
            timestamp: record.timestamp,
            to_currency: leg.map(|l| l.to_currency.to_string()),
            rate: leg.map(|l| l.rate),
            gross_target_amount: leg.map(|l| l.gross_target_amount),
            fee_amount: leg.map(|l| l.fee_amount),
            net_target_amount: leg.map(|l| l.net_target_amount),
            batch_id: record.batch_id.clone(),
            request_signature: record.request_signature.as_ref().map(Into::into),
        }
    }
}

/// A page of a coop's history, newest first.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TransactionPage {
    /// The transactions.
    pub transactions: Vec<TransactionDto>,
    /// Where this page is.
    pub pagination: common::PaginationDto,
}

/// The outcome of one batch item.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct BatchItemDto {
    /// Whether the payment was recorded.
    pub success: bool,
    /// The transaction's id, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    /// Why it was refused, otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    /// The refusal's code, e.g. `INSUFFICIENT_CREDIT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub code: Option<String>,
}

/// A batch's outcome, item by item, in request order.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct BatchDto {
    /// Payments recorded.
    pub succeeded: usize,
    /// Payments refused.
    pub failed: usize,
    /// One result per payment.
    pub results: Vec<BatchItemDto>,
}

impl From<&[BatchItemResult]> for BatchDto {
    fn from(results: &[BatchItemResult]) -> Self {
        let succeeded = results.iter().filter(|r| r.record.is_some()).count();
        let results = results
            .iter()
            .map(|r| match (&r.record, &r.error) {
                (Some(record), _) => {
                    BatchItemDto { success: true, id: Some(record.id.clone()), error: None, code: None }
                }
                (None, error) => BatchItemDto {
                    success: false,
                    id: None,
                    error: error.as_ref().map(|e| ApiError::from(e.clone()).message()),
                    code: error.as_ref().map(|e| e.code().as_str().to_owned()),
                },
            })
            .collect::<Vec<_>>();
        Self { succeeded, failed: results.len() - succeeded, results }
    }
}

fn transaction_response(record: &TransactionRecord) -> Response {
    (StatusCode::CREATED, Json(TransactionDto::from(record))).into_response()
}

fn batch_response(results: &Vec<BatchItemResult>) -> Response {
    (StatusCode::OK, Json(BatchDto::from(results.as_slice()))).into_response()
}

impl PaymentBody {
    fn into_request(
        self,
        caller: &Caller,
        require_from: bool,
        signature: &Option<RequestSignature>,
    ) -> ApiResult<PaymentRequest> {
        let from = match self.from {
            Some(from) => from,
            None if require_from => return Err(Error::bad_request_field("from", "from is required").into()),
            None => caller.did.to_string(),
        };
        if from != caller.did.as_str() {
            return Err(Error::forbidden(
                "payments can only be made from the caller's own account (from must equal the token's DID)",
            )
            .into());
        }
        common::did("to", &self.to)?;
        Ok(PaymentRequest {
            from,
            to: self.to,
            amount: payment_amount("amount", self.amount)?,
            currency: self.currency.as_deref().map(|c| common::currency("currency", c)).transpose()?,
            memo: self.memo.or(self.description),
            request_signature: signature.clone(),
        })
    }
}

/// Runs a payment-creating operation under velocity permits (one per payment): they are kept
/// only when the operation created something now (a fresh result; refusals and replays are
/// not counted). A keyed request whose key already has a stored answer is answered with it
/// first: a replay creates nothing, so the velocity limit neither refuses nor counts it.
/// `answer` renders a result, fresh or replayed, the same way.
async fn with_velocity<T, F, Fut>(
    state: &AppState,
    payer: &Did,
    count: usize,
    key: Option<&Idempotency>,
    answer: fn(&T) -> Response,
    operation: F,
) -> ApiResult<Response>
where
    T: serde::de::DeserializeOwned,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Replay<T>, Error>>,
{
    if let Some(key) = key
        && let Some(stored) = state.ledger.stored_answer::<T>(key).await?
    {
        return Ok(replayed(stored, answer));
    }
    let permits = state.limits.check_velocity(payer, count).await?;
    let result = operation().await;
    if !matches!(result, Ok(Replay::Fresh(_))) {
        permits.cancel(&state.limits).await;
    }
    match result? {
        Replay::Fresh(value) => Ok(answer(&value)),
        Replay::Replayed(stored) => Ok(replayed(stored, answer)),
    }
}

/// A payment request as it arrived: what its idempotency key and its evidence are read from.
struct Sent<'a> {
    headers: &'a HeaderMap,
    uri: &'a Uri,
    body: &'a [u8],
    signature: Signature,
}

async fn pay(
    state: &AppState,
    caller: &Caller,
    coop: CoopId,
    sent: Sent<'_>,
    require_from: bool,
) -> ApiResult<Response> {
    let request: PaymentBody = parse_json(sent.body)?;
    let request = request.into_request(caller, require_from, &sent.signature.0)?;
    let key = idempotency(sent.headers, caller, &coop, sent.uri.path(), sent.body)?;
    with_velocity(state, &caller.did, 1, key.clone().as_ref(), transaction_response, || {
        state.ledger.pay(&coop, request, key)
    })
    .await
}

/// Creates a payment in a coop (`from` must be the caller).
#[utoipa::path(post, path = "/v1/ledger/{coop}/payment", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path, description = "Cooperative id"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first answer for 24 h")),
    request_body = PaymentBody,
    responses((status = 201, body = TransactionDto), (status = 400, body = crate::openapi::ErrorBody),
              (status = 403, body = crate::openapi::ErrorBody),
              (status = 409, description = "The payment would take the payer below its credit limit \
(`INSUFFICIENT_CREDIT`) or a balance out of the representable range, or the Idempotency-Key was used with another \
request or is still in progress", body = crate::openapi::ErrorBody),
              (status = 429, body = crate::openapi::ErrorBody)))]
pub async fn payment(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerWrite>,
    headers: HeaderMap,
    uri: Uri,
    signature: Signature,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    // The short family's `POST /ledger/transaction` lets `from` default to the caller.
    let require_from = caller.family == Family::V1;
    let coop = caller.coop.clone();
    pay(&state, &caller, coop, Sent { headers: &headers, uri: &uri, body: &body, signature }, require_from).await
}

/// `?currency=` of balance routes.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct BalanceQuery {
    /// Currency to report in `balance`; the coop's default when absent.
    pub currency: Option<String>,
}

/// Balances of one account.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct BalanceDto {
    /// The account (a DID or a system account).
    pub did: String,
    /// The currency of `balance`.
    pub currency: String,
    /// Balance in `currency`.
    #[schema(value_type = f64)]
    pub balance: Amount,
    /// Every currency's balance, by currency code.
    #[schema(value_type = std::collections::BTreeMap<String, f64>)]
    pub balances: std::collections::BTreeMap<String, Amount>,
}

impl From<AccountBalances> for BalanceDto {
    fn from(b: AccountBalances) -> Self {
        Self {
            did: b.account,
            currency: b.currency.to_string(),
            balance: b.balance,
            balances: b.balances.into_iter().map(|(c, a)| (c.to_string(), a)).collect(),
        }
    }
}

/// The 200 answer of the balance routes: [`BalanceDto`]'s JSON, byte for byte what serde_json
/// writes for it (the test `balance_json_is_the_dtos` holds it to that), written straight from
/// the domain's balances without building the DTO's map and strings, in a header map with room
/// for every header the answer will carry. The balance read is the gateway's hottest route
/// (docs/PERFORMANCE.md).
#[derive(Debug)]
pub struct BalanceAnswer(AccountBalances);

/// Headers of a balance answer: its type and length, `Cache-Control` and the three rate-limit
/// headers, the request id, the security headers, and the cross-origin ones.
const BALANCE_ANSWER_HEADERS: usize = 16;

impl IntoResponse for BalanceAnswer {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(160);
        write_balance_json(&mut body, &self.0);
        let mut response = Response::new(axum::body::Body::from(body));
        let headers = response.headers_mut();
        headers.reserve(BALANCE_ANSWER_HEADERS);
        headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
        response
    }
}

/// Writes `b` as the JSON of [`BalanceDto`]: its fields in their order, `balances` in the order
/// of a `BTreeMap` of currency codes (the last of two equal codes wins, as in the map).
fn write_balance_json(out: &mut Vec<u8>, b: &AccountBalances) {
    out.extend_from_slice(b"{\"did\":");
    write_json_str(out, &b.account);
    out.extend_from_slice(b",\"currency\":");
    write_json_str(out, b.currency.as_str());
    out.extend_from_slice(b",\"balance\":");
    write_amount(out, b.balance);
    out.extend_from_slice(b",\"balances\":{");
    let mut entries: Vec<&(gateway_core::Currency, Amount)> = b.balances.iter().collect();
    // Stable: equal codes keep their order, and the last of them is the one written.
    entries.sort_by(|x, y| x.0.cmp(&y.0));
    let mut first = true;
    for (i, (currency, amount)) in entries.iter().map(|e| (&e.0, e.1)).enumerate() {
        if entries.get(i + 1).is_some_and(|next| next.0 == *currency) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        write_json_str(out, currency.as_str());
        out.push(b':');
        write_amount(out, amount);
    }
    out.extend_from_slice(b"}}");
}

/// A JSON string: as it is between quotes when it needs no escape (printable ASCII other than
/// `"` and `\`, as DIDs, system accounts and currency codes are), else serde_json's escaping.
fn write_json_str(out: &mut Vec<u8>, text: &str) {
    // One pass without branches (the usual text is a 56-byte DID).
    if text.bytes().fold(true, |plain, b| plain & ((0x20..0x7f).contains(&b) & (b != b'"') & (b != b'\\'))) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, text).expect("a string is written to a Vec without failing");
    }
}

/// An amount as its own serializer writes it.
fn write_amount(out: &mut Vec<u8>, amount: Amount) {
    serde_json::to_writer(&mut *out, &amount).expect("an amount is written to a Vec without failing");
}

async fn balance_of(
    state: &AppState,
    coop: &CoopId,
    account: &str,
    currency: Option<String>,
) -> ApiResult<BalanceAnswer> {
    let currency = currency.as_deref().map(|c| common::currency("currency", c)).transpose()?;
    Ok(BalanceAnswer(state.ledger.balance(coop, account, currency).await?))
}

fn account(coop: &CoopId, text: &str) -> ApiResult<String> {
    if is_system(coop, text) {
        return Ok(text.to_owned());
    }
    Ok(common::did("did", text)?.into_string())
}

/// The account of a balance route: the path's `{did}`, or the caller's own on the short route.
#[derive(Debug, Deserialize)]
pub struct AccountPath {
    /// A member DID or a system account.
    pub did: Option<String>,
}

/// Balance of a member (or system account) of the coop.
#[utoipa::path(get, path = "/v1/ledger/{coop}/balance/{did}", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path), ("did" = String, Path, description = "A member DID or a system account"), BalanceQuery),
    responses((status = 200, body = BalanceDto), (status = 403, body = crate::openapi::ErrorBody), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn balance(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerRead>,
    Path(path): Path<AccountPath>,
    Query(query): Query<BalanceQuery>,
) -> ApiResult<BalanceAnswer> {
    // The short family's `GET /ledger/balance` is the caller's own.
    let account = match path.did {
        Some(did) => account(&caller.coop, &did)?,
        None => caller.did.as_str().to_owned(),
    };
    balance_of(&state, &caller.coop, &account, query.currency).await
}

/// Filters of the history routes.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct HistoryParams {
    /// Page size, default 50, at most 100.
    pub limit: Option<u64>,
    /// Items to skip.
    pub offset: Option<u64>,
    /// Only transactions from or to this account.
    pub did: Option<String>,
    /// Only this currency.
    pub currency: Option<String>,
}

async fn history_of(state: &AppState, coop: CoopId, params: HistoryParams) -> ApiResult<Json<TransactionPage>> {
    let page = PageQuery { limit: params.limit, offset: params.offset }.page()?;
    state.coops.get(&coop).await?;
    let query = HistoryQuery {
        account: params.did.as_deref().map(|d| account(&coop, d)).transpose()?,
        currency: params.currency.as_deref().map(|c| common::currency("currency", c)).transpose()?,
        coop,
        page,
    };
    let (items, total) = state.ledger.history(query).await?;
    Ok(Json(TransactionPage {
        transactions: items.iter().map(TransactionDto::from).collect(),
        pagination: page.info(total).into(),
    }))
}

/// The coop's history, newest first.
#[utoipa::path(get, path = "/v1/ledger/{coop}/history", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path), HistoryParams),
    responses((status = 200, description = "A page of transactions, newest first", body = TransactionPage)))]
pub async fn history(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerRead>,
    Query(params): Query<HistoryParams>,
) -> ApiResult<Json<TransactionPage>> {
    history_of(&state, caller.coop.clone(), params).await
}

/// A batch: `{"payments": [...], "atomic": false}` or a bare array.
#[derive(Debug, Deserialize, ToSchema)]
pub struct BatchBody {
    /// The payments (1 to 1000), each from the caller.
    pub payments: Vec<PaymentBody>,
    /// All or nothing.
    #[serde(default)]
    pub atomic: bool,
}

/// Several payments by the caller in one request.
#[utoipa::path(post, path = "/v1/ledger/{coop}/payments/batch", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    request_body = BatchBody,
    responses((status = 200, description = "Each payment's outcome, in request order", body = BatchDto),
              (status = 409, description = "An atomic batch was refused by one of its payments (the message names it), \
or the Idempotency-Key was used with another request or is still in progress", body = crate::openapi::ErrorBody)))]
pub async fn batch(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerWrite>,
    headers: HeaderMap,
    uri: Uri,
    signature: Signature,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let batch: BatchBody = if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        BatchBody { payments: parse_json(&body)?, atomic: false }
    } else {
        parse_json(&body)?
    };
    let count = batch.payments.len();
    if count == 0 || count > gateway_domain::ledger::MAX_BATCH {
        return Err(Error::bad_request_field("payments", "a batch holds 1 to 1000 payments").into());
    }
    let items = batch
        .payments
        .into_iter()
        .map(|p| p.into_request(&caller, false, &signature.0))
        .collect::<ApiResult<Vec<_>>>()?;
    let key = idempotency(&headers, &caller, &coop, uri.path(), &body)?;
    let atomic = batch.atomic;
    with_velocity(&state, &caller.did, count, key.clone().as_ref(), batch_response, || {
        state.ledger.batch(&coop, items, atomic, key)
    })
    .await
}

/// A conversion quote request.
#[derive(Debug, Deserialize, ToSchema)]
pub struct QuoteBody {
    /// Source amount.
    #[schema(value_type = f64)]
    pub amount: Amount,
    /// Source currency.
    pub from_currency: String,
    /// Target currency.
    pub to_currency: String,
}

/// A conversion quote, binding until `valid_until`.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct QuoteDto {
    /// Pass as `quote_id` to convert at exactly these figures.
    pub quote_id: String,
    /// Target units per source unit.
    #[schema(value_type = f64)]
    pub rate: Amount,
    /// `amount × rate`.
    #[schema(value_type = f64)]
    pub gross_target_amount: Amount,
    /// The fee the coop's exchange account keeps.
    #[schema(value_type = f64)]
    pub fee_amount: Amount,
    /// What the payee would receive.
    #[schema(value_type = f64)]
    pub net_target_amount: Amount,
    /// Unix seconds.
    pub valid_until: u64,
}

impl From<&QuoteRecord> for QuoteDto {
    fn from(q: &QuoteRecord) -> Self {
        Self {
            quote_id: q.id.clone(),
            rate: q.rate,
            gross_target_amount: q.gross_target_amount,
            fee_amount: q.fee_amount,
            net_target_amount: q.net_target_amount,
            valid_until: q.valid_until,
        }
    }
}

/// Quotes a cross-currency payment (valid 60 s, once, by the caller, for this amount).
#[utoipa::path(post, path = "/v1/ledger/{coop}/payment/convert/quote", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path)), request_body = QuoteBody,
    responses((status = 200, description = "The quote", body = QuoteDto),
              (status = 404, description = "The cooperative does not exist, or no rate is set for the pair nor for its \
opposite", body = crate::openapi::ErrorBody),
              (status = 409, description = "Only the opposite pair's rate is set, and its inverse is below the \
ledger's precision (0.000001)", body = crate::openapi::ErrorBody)))]
pub async fn quote(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerRead>,
    Json(body): Json<QuoteBody>,
) -> ApiResult<Json<QuoteDto>> {
    let coop = caller.coop.clone();
    let amount = payment_amount("amount", body.amount)?;
    let from = common::currency("from_currency", &body.from_currency)?;
    let to = common::currency("to_currency", &body.to_currency)?;
    Ok(Json(QuoteDto::from(&state.ledger.quote(&coop, &caller.did, amount, from, to).await?)))
}

/// A cross-currency payment.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ConvertBody {
    /// Payer: the caller.
    pub from: String,
    /// Payee.
    pub to: String,
    /// Debited in `from_currency`.
    #[schema(value_type = f64)]
    pub amount: Amount,
    /// Source currency.
    pub from_currency: String,
    /// Target currency.
    pub to_currency: String,
    /// Upper bound on the net target amount.
    #[schema(value_type = Option<f64>)]
    pub max_target_amount: Option<Amount>,
    /// Lower bound on the net target amount.
    #[schema(value_type = Option<f64>)]
    pub min_target_amount: Option<Amount>,
    /// A live quote to honour.
    pub quote_id: Option<String>,
}

/// Executes a cross-currency payment through the coop's exchange account.
#[utoipa::path(post, path = "/v1/ledger/{coop}/payment/convert", tag = "ledger", security(("bearer" = [])),
    params(("coop" = String, Path), ("Idempotency-Key" = Option<String>, Header)), request_body = ConvertBody,
    responses((status = 201, body = TransactionDto),
              (status = 400, description = "A field is invalid, or the quote is for another currency pair \
(field `quote_id`) or another amount (field `amount`)", body = crate::openapi::ErrorBody),
              (status = 403, description = "`from` is not the caller, or the quote was asked for by another member \
(`details.reason = \"quote_of_another_member\"`)", body = crate::openapi::ErrorBody),
              (status = 404, description = "The cooperative does not exist, `quote_id` names no quote of it, or no \
rate is set for the pair nor for its opposite", body = crate::openapi::ErrorBody),
              (status = 409, description = "The net target amount is outside the bounds (`SLIPPAGE_EXCEEDED`), the \
payment would take the payer below its credit limit (`INSUFFICIENT_CREDIT`) or a balance out of range, the quote has \
expired or was already used (a quote is single-use), the opposite pair's inverse rate is below the ledger's precision, or the Idempotency-Key was used with \
another request or is still in progress", body = crate::openapi::ErrorBody)))]
pub async fn convert(
    State(state): State<AppState>,
    caller: CoopCaller<LedgerWrite>,
    headers: HeaderMap,
    uri: Uri,
    signature: Signature,
    JsonBytes(body): JsonBytes,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let request: ConvertBody = parse_json(&body)?;
    if request.from != caller.did.as_str() {
        return Err(Error::forbidden(
            "payments can only be made from the caller's own account (from must equal the token's DID)",
        )
        .into());
    }
    common::did("to", &request.to)?;
    let conversion = ConversionRequest {
        from: request.from,
        to: request.to,
        amount: payment_amount("amount", request.amount)?,
        from_currency: common::currency("from_currency", &request.from_currency)?,
        to_currency: common::currency("to_currency", &request.to_currency)?,
        max_target_amount: request.max_target_amount,
        min_target_amount: request.min_target_amount,
        quote_id: request.quote_id,
        request_signature: signature.0,
    };
    let key = idempotency(&headers, &caller, &coop, uri.path(), &body)?;
    with_velocity(&state, &caller.did, 1, key.clone().as_ref(), transaction_response, || {
        state.ledger.convert(&coop, conversion, key)
    })
    .await
}

/// An exchange rate of the coop.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct RateDto {
    /// Source currency.
    pub from_currency: String,
    /// Target currency.
    pub to_currency: String,
    /// Target units per source unit.
    #[schema(value_type = f64)]
    pub rate: Amount,
    /// Source units per target unit, to the ledger's precision (0 for a zero rate).
    #[schema(value_type = f64)]
    pub inverse_rate: Amount,
    /// Who set it.
    pub set_by: String,
    /// Unix seconds.
    pub set_at: u64,
}

impl From<&RateRecord> for RateDto {
    fn from(rate: &RateRecord) -> Self {
        let inverse_rate = if rate.rate.micros() > 0 {
            Amount::from_micros((1_000_000_000_000i128 / i128::from(rate.rate.micros())) as i64)
        } else {
            Amount::ZERO
        };
        Self {
            from_currency: rate.from_currency.to_string(),
            to_currency: rate.to_currency.to_string(),
            rate: rate.rate,
            inverse_rate,
            set_by: rate.set_by.to_string(),
            set_at: rate.set_at,
        }
    }
}

/// The exchange rate of the token's coop for a pair.
#[utoipa::path(get, path = "/v1/oracle/rate/{from}/{to}", tag = "ledger", security(("bearer" = [])),
    params(("from" = String, Path), ("to" = String, Path)),
    responses((status = 200, description = "The rate", body = RateDto),
              (status = 404, description = "No rate is set for the pair nor for its opposite in the token's coop",
               body = crate::openapi::ErrorBody),
              (status = 409, description = "Only the opposite pair's rate is set, and its inverse is below the \
ledger's precision (0.000001)", body = crate::openapi::ErrorBody)))]
pub async fn get_rate(
    State(state): State<AppState>,
    caller: CoopCaller<OracleRead>,
    Path((from, to)): Path<(String, String)>,
) -> ApiResult<Json<RateDto>> {
    let coop = caller.coop.clone();
    let (from, to) = (common::currency("from", &from)?, common::currency("to", &to)?);
    Ok(Json(RateDto::from(&state.ledger.rate(&coop, &from, &to).await?)))
}

/// A manual rate.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RateBody {
    /// Source currency.
    pub from_currency: String,
    /// Target currency.
    pub to_currency: String,
    /// Target units per source unit (at most 6 decimals).
    #[schema(value_type = f64)]
    pub rate: Amount,
}

/// Sets a manual exchange rate for the token's coop.
#[utoipa::path(post, path = "/v1/oracle/rate", tag = "ledger", security(("bearer" = [])), request_body = RateBody,
    responses((status = 201, description = "The rate", body = RateDto),
              (status = 404, description = "The token's cooperative does not exist",
               body = crate::openapi::ErrorBody)))]
pub async fn set_rate(
    State(state): State<AppState>,
    caller: CoopCaller<OracleWrite>,
    Json(body): Json<RateBody>,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let from = common::currency("from_currency", &body.from_currency)?;
    let to = common::currency("to_currency", &body.to_currency)?;
    let rate = state.ledger.set_rate(&coop, &caller.did, from, to, body.rate).await?;
    Ok((StatusCode::CREATED, Json(RateDto::from(&rate))).into_response())
}

#[cfg(test)]
mod tests {
    use gateway_core::Currency;
    use proptest::prelude::*;

    use super::*;

    fn currency() -> impl Strategy<Value = Currency> {
        "[A-Za-z0-9_]{1,6}".prop_map(|code| Currency::parse(&code).expect("a valid code"))
    }

    fn amount() -> impl Strategy<Value = Amount> {
        prop_oneof![
            any::<i64>().prop_map(Amount::from_micros),
            (-1_000_000i64..1_000_000).prop_map(|units| Amount::from_micros(units * 1_000_000)),
        ]
    }

    fn written(b: &AccountBalances) -> String {
        let mut out = Vec::new();
        write_balance_json(&mut out, b);
        String::from_utf8(out).expect("UTF-8")
    }

    proptest! {
        /// Any account text (quotes, backslashes, control characters, any Unicode), any
        /// amounts, currencies in any order and repeated: the same bytes as the DTO through
        /// serde_json.
        #[test]
        fn balance_json_is_the_dtos(
            account in any::<String>(),
            currency in currency(),
            balance in amount(),
            balances in proptest::collection::vec((currency(), amount()), 0..6),
        ) {
            let b = AccountBalances { account, currency, balance, balances };
            let dto = serde_json::to_string(&BalanceDto::from(AccountBalances {
                account: b.account.clone(),
                currency: b.currency.clone(),
                balance: b.balance,
                balances: b.balances.clone(),
            }))
            .unwrap();
            prop_assert_eq!(written(&b), dto);
        }
    }

    #[test]
    fn a_balance_answer_is_json_with_room_for_its_headers() {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let hours = Currency::parse("hours").unwrap();
        let b = AccountBalances {
            account: did.into(),
            currency: hours.clone(),
            balance: Amount::from_micros(-1_500_000),
            balances: vec![
                (Currency::parse("tokens").unwrap(), Amount::from_micros(2_000_000)),
                (hours, Amount::from_micros(-1_500_000)),
            ],
        };
        assert_eq!(
            written(&b),
            format!(r#"{{"did":"{did}","currency":"hours","balance":-1.5,"balances":{{"hours":-1.5,"tokens":2}}}}"#)
        );
        let response = BalanceAnswer(b).into_response();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[axum::http::header::CONTENT_TYPE], "application/json");
        assert!(response.headers().capacity() >= BALANCE_ANSWER_HEADERS);
    }
}
