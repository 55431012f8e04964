//! Mutual-credit ledger and exchange-rate routes: payments (with optional `Idempotency-Key`),
//! balances, history, batches, cross-currency quotes and conversions, oracle rates.
//!
//! Money is [`Amount`] end to end: parsed from and written as exact decimal text, never
//! through `f64`. The gateway enforces every ledger rule (credit floor, membership, velocity);
//! this module only shapes requests and answers.

use std::collections::BTreeMap;

use gateway_core::{Amount, CoopId, Currency, Did};
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
use crate::error::Result;

/// A payment from the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRequest {
    /// The payer: must be the token's DID.
    pub from: Did,
    /// The payee, a member of the coop.
    pub to: Did,
    /// Positive, at most 6 decimals, at most 1e12.
    pub amount: Amount,
    /// The coop's default currency when `None`.
    pub currency: Option<Currency>,
    /// Free text.
    pub memo: Option<String>,
}

#[derive(Serialize)]
struct PaymentBody<'a> {
    from: &'a str,
    to: &'a str,
    amount: Amount,
    #[serde(skip_serializing_if = "Option::is_none")]
    currency: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memo: Option<&'a str>,
}

impl PaymentRequest {
    fn body(&self) -> PaymentBody<'_> {
        PaymentBody {
            from: self.from.as_str(),
            to: self.to.as_str(),
            amount: self.amount,
            currency: self.currency.as_ref().map(Currency::as_str),
            memo: self.memo.as_deref(),
        }
    }
}

/// A recorded transaction (a payment, or a conversion with its target-side fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transaction {
    /// Id.
    pub id: String,
    /// `payment` or `conversion`.
    pub kind: String,
    /// Payer account (a DID or a system account such as `coop:<id>:treasury`).
    pub from: String,
    /// Payee account.
    pub to: String,
    /// Debited amount.
    pub amount: Amount,
    /// Currency of `amount`.
    pub currency: String,
    /// Free text.
    #[serde(default)]
    pub memo: Option<String>,
    /// Unix seconds.
    pub timestamp: u64,
    /// Conversions: the target currency.
    #[serde(default)]
    pub to_currency: Option<String>,
    /// Conversions: the rate applied.
    #[serde(default)]
    pub rate: Option<Amount>,
    /// Conversions: amount × rate.
    #[serde(default)]
    pub gross_target_amount: Option<Amount>,
    /// Conversions: the coop's fee.
    #[serde(default)]
    pub fee_amount: Option<Amount>,
    /// Conversions: what the payee received.
    #[serde(default)]
    pub net_target_amount: Option<Amount>,
    /// The signature of the request that made it, when it was signed: evidence anyone can check
    /// offline (`gateway_httpsig::verify_evidence`, `gatewayctl verify-request`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_signature: Option<gateway_core::RequestSignature>,
}

/// The balances of one account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Balance {
    /// The account.
    pub did: String,
    /// The currency of `balance`.
    pub currency: String,
    /// Balance in `currency` (negative: the account owes the coop).
    pub balance: Amount,
    /// Every currency's balance.
    pub balances: BTreeMap<String, Amount>,
}

/// Filters of the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Which page.
    pub page: PageRequest,
    /// Only transactions from or to this account.
    pub account: Option<String>,
    /// Only this currency.
    pub currency: Option<Currency>,
}

/// A page of the history, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransactionPage {
    /// The transactions.
    pub transactions: Vec<Transaction>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// The outcome of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    /// Payments made.
    pub succeeded: u64,
    /// Payments refused.
    pub failed: u64,
    /// One entry per payment, in order.
    pub results: Vec<BatchItemResult>,
}

/// One payment of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItemResult {
    /// Whether it was made.
    pub success: bool,
    /// The transaction id.
    #[serde(default)]
    pub id: Option<String>,
    /// Why it was refused.
    #[serde(default)]
    pub error: Option<String>,
    /// The error code of the refusal.
    #[serde(default)]
    pub code: Option<String>,
}

/// A conversion quote request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteRequest {
    /// Source amount.
    pub amount: Amount,
    /// Source currency.
    pub from_currency: Currency,
    /// Target currency.
    pub to_currency: Currency,
}

/// A quote, valid 60 s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quote {
    /// Pass it to [`ConversionRequest::quote_id`] to get this rate.
    pub quote_id: String,
    /// Target units per source unit.
    pub rate: Amount,
    /// amount × rate.
    pub gross_target_amount: Amount,
    /// The coop's fee.
    pub fee_amount: Amount,
    /// What the payee would receive.
    pub net_target_amount: Amount,
    /// Unix seconds.
    pub valid_until: u64,
}

/// A cross-currency payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionRequest {
    /// The payer (the caller).
    pub from: Did,
    /// The payee.
    pub to: Did,
    /// Debited in `from_currency`.
    pub amount: Amount,
    /// Source currency.
    pub from_currency: Currency,
    /// Target currency.
    pub to_currency: Currency,
    /// Refuse (409) if the payee would receive more than this (the interface's slippage bound).
    pub max_target_amount: Option<Amount>,
    /// Refuse (409) if the payee would receive less than this.
    pub min_target_amount: Option<Amount>,
    /// A live quote whose rate to use.
    pub quote_id: Option<String>,
}

#[derive(Serialize)]
struct ConversionBody<'a> {
    from: &'a str,
    to: &'a str,
    amount: Amount,
    from_currency: &'a str,
    to_currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_target_amount: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_target_amount: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quote_id: Option<&'a str>,
}

/// An exchange rate of the token's coop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// Source currency.
    pub from_currency: String,
    /// Target currency.
    pub to_currency: String,
    /// Target units per source unit.
    pub rate: Amount,
    /// 1 / rate, rounded down.
    pub inverse_rate: Amount,
    /// Who set it.
    pub set_by: String,
    /// Unix seconds.
    pub set_at: u64,
}

impl Client {
    /// `POST /v1/ledger/{coop}/payment`. With an `idempotency_key`, a repeat of the same
    /// request within 24 h returns the first answer, which also makes the request safe to
    /// retry automatically after a transient failure.
    pub async fn pay(
        &self,
        coop: &CoopId,
        payment: &PaymentRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Transaction> {
        let call = Call::new(Method::POST, &["v1", "ledger", coop.as_str(), "payment"])
            .idempotency_key(idempotency_key)
            .json(&payment.body())?;
        self.call_json(call).await
    }

    /// `GET /v1/ledger/{coop}/balance/{account}`: any member's or system account's balances.
    pub async fn balance(&self, coop: &CoopId, account: &str, currency: Option<&Currency>) -> Result<Balance> {
        let call = Call::new(Method::GET, &["v1", "ledger", coop.as_str(), "balance", account])
            .query("currency", currency.map(Currency::as_str));
        self.call_json(call).await
    }

    /// `GET /ledger/balance` (short family): the caller's own balance in the token's coop.
    pub async fn own_balance(&self, currency: Option<&Currency>) -> Result<Balance> {
        let call = Call::new(Method::GET, &["ledger", "balance"]).query("currency", currency.map(Currency::as_str));
        self.call_json(call).await
    }

    /// `GET /v1/ledger/{coop}/export` (INTERFACE.md §13): the coop's books as `format` (`beancount`,
    /// `hledger` or `csv`) for the days `[from, to)` (`YYYY-MM-DD`, UTC; each optional), of one
    /// account when `member` is given (a member may only export their own), written to `out` as
    /// the gateway streams it, in constant memory. Returns the bytes written.
    ///
    /// Refusals (400 naming the field, 403, 404, 503) arrive before any byte is written. A
    /// failure mid-way (the connection or the gateway) is an error after part of the export was
    /// written: write to a temporary file and keep it only on success, as `gatewayctl export`
    /// does. The request has no overall time limit (a large export takes a while), only one
    /// between two reads (two minutes).
    pub async fn export_to<W: tokio::io::AsyncWrite + Unpin + ?Sized>(
        &self,
        coop: &CoopId,
        format: &str,
        from: Option<&str>,
        to: Option<&str>,
        member: Option<&str>,
        out: &mut W,
    ) -> Result<u64> {
        use tokio::io::AsyncWriteExt as _;
        let segments = ["v1", "ledger", coop.as_str(), "export"].map(str::to_owned);
        let mut url = self.url(&segments);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("format", format);
            for (name, value) in [("from", from), ("to", to), ("member", member)] {
                if let Some(value) = value {
                    query.append_pair(name, value);
                }
            }
        }
        // A client of its own: the shared one limits every request's whole duration.
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.inner.tls).clone())
            .connect_timeout(std::time::Duration::from_secs(30))
            .read_timeout(std::time::Duration::from_secs(120))
            .user_agent(concat!("gateway-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| crate::Error::Usage(format!("cannot build the HTTP client: {e}")))?;
        let mut relogged = false;
        let mut response = loop {
            let token = self.token().await?;
            let response = http
                .get(url.clone())
                .header(reqwest::header::AUTHORIZATION, format!("Bearer {token}"))
                .send()
                .await
                .map_err(|e| crate::Error::transport(&e))?;
            let status = response.status();
            if status.is_success() {
                break response;
            }
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let body = response.bytes().await.map_err(|e| crate::Error::transport(&e))?;
            let error = crate::Error::from_response(status.as_u16(), retry_after, &body);
            if matches!(error, crate::Error::Authentication { .. })
                && !relogged
                && self.invalidate_session(&token).await
            {
                relogged = true;
                continue;
            }
            return Err(error);
        };
        let mut written = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(|e| crate::Error::transport(&e))? {
            out.write_all(&chunk).await.map_err(|e| crate::Error::Usage(format!("writing the export: {e}")))?;
            written += chunk.len() as u64;
        }
        out.flush().await.map_err(|e| crate::Error::Usage(format!("writing the export: {e}")))?;
        Ok(written)
    }

    /// `GET /v1/ledger/{coop}/history`, newest first.
    pub async fn history(&self, coop: &CoopId, query: &HistoryQuery) -> Result<TransactionPage> {
        let call = Call::new(Method::GET, &["v1", "ledger", coop.as_str(), "history"])
            .query("limit", query.page.limit)
            .query("offset", query.page.offset)
            .query("did", query.account.as_deref())
            .query("currency", query.currency.as_ref().map(Currency::as_str));
        self.call_json(call).await
    }

    /// `POST /v1/ledger/{coop}/payments/batch` (1 to 1000 payments, each from the caller).
    /// `atomic`: all or nothing (409 naming the first failing index).
    pub async fn pay_batch(
        &self,
        coop: &CoopId,
        payments: &[PaymentRequest],
        atomic: bool,
        idempotency_key: Option<&str>,
    ) -> Result<BatchResult> {
        let body = serde_json::json!({
            "payments": payments.iter().map(PaymentRequest::body).collect::<Vec<_>>(),
            "atomic": atomic,
        });
        let call = Call::new(Method::POST, &["v1", "ledger", coop.as_str(), "payments", "batch"])
            .idempotency_key(idempotency_key)
            .json(&body)?;
        self.call_json(call).await
    }

    /// `POST /v1/ledger/{coop}/payment/convert/quote`.
    pub async fn quote(&self, coop: &CoopId, request: &QuoteRequest) -> Result<Quote> {
        let body = serde_json::json!({
            "amount": request.amount,
            "from_currency": request.from_currency.as_str(),
            "to_currency": request.to_currency.as_str(),
        });
        let call =
            Call::new(Method::POST, &["v1", "ledger", coop.as_str(), "payment", "convert", "quote"]).json(&body)?;
        self.call_json(call).await
    }

    /// `POST /v1/ledger/{coop}/payment/convert`: debits `from_currency`, credits the payee the
    /// net amount in `to_currency` through the coop's exchange account.
    pub async fn convert(
        &self,
        coop: &CoopId,
        request: &ConversionRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Transaction> {
        let body = ConversionBody {
            from: request.from.as_str(),
            to: request.to.as_str(),
            amount: request.amount,
            from_currency: request.from_currency.as_str(),
            to_currency: request.to_currency.as_str(),
            max_target_amount: request.max_target_amount,
            min_target_amount: request.min_target_amount,
            quote_id: request.quote_id.as_deref(),
        };
        let call = Call::new(Method::POST, &["v1", "ledger", coop.as_str(), "payment", "convert"])
            .idempotency_key(idempotency_key)
            .json(&body)?;
        self.call_json(call).await
    }

    /// `GET /v1/oracle/rate/{from}/{to}` in the token's coop.
    pub async fn rate(&self, from: &Currency, to: &Currency) -> Result<Rate> {
        self.call_json(Call::new(Method::GET, &["v1", "oracle", "rate", from.as_str(), to.as_str()])).await
    }

    /// `POST /v1/oracle/rate` (scope `oracle:write`): sets a manual rate for the token's coop.
    pub async fn set_rate(&self, from: &Currency, to: &Currency, rate: Amount) -> Result<Rate> {
        let body = serde_json::json!({ "from_currency": from.as_str(), "to_currency": to.as_str(), "rate": rate });
        self.call_json(Call::new(Method::POST, &["v1", "oracle", "rate"]).json(&body)?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payment_bodies_carry_exact_amounts_and_omit_absent_fields() {
        let from = crate::Identity::from_seed([1; 32]).did().clone();
        let to = crate::Identity::from_seed([2; 32]).did().clone();
        let payment = PaymentRequest {
            from: from.clone(),
            to: to.clone(),
            amount: Amount::parse_payment("0.000001").unwrap(),
            currency: None,
            memo: None,
        };
        let text = serde_json::to_string(&payment.body()).unwrap();
        assert!(text.contains(r#""amount":0.000001"#), "{text}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            json!({"from": from.as_str(), "to": to.as_str(), "amount": 0.000001})
        );
    }

    #[test]
    fn transactions_parse_with_and_without_conversion_fields() {
        let payment: Transaction = serde_json::from_str(
            r#"{"id":"t1","kind":"payment","from":"a","to":"b","amount":12.5,"currency":"hours","memo":null,"timestamp":5}"#,
        )
        .unwrap();
        assert_eq!(payment.amount, Amount::from_micros(12_500_000));
        assert_eq!(payment.net_target_amount, None);
        let conversion: Transaction = serde_json::from_str(
            r#"{"id":"t2","kind":"conversion","from":"a","to":"b","amount":10,"currency":"hours","memo":"x","timestamp":5,
                "to_currency":"eur","rate":1.5,"gross_target_amount":15,"fee_amount":0,"net_target_amount":15}"#,
        )
        .unwrap();
        assert_eq!(conversion.net_target_amount, Some(Amount::from_units(15)));
    }
}
