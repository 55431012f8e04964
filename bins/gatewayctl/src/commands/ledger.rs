//! `pay`, `balance` and `history`. Amounts stay exact decimals from the command line to the
//! screen; credit limits and velocity are the gateway's to enforce, not re-checked here.

use anyhow::Context as _;
use gateway_client::{Balance, HistoryQuery, PageRequest, PaymentRequest, Transaction};
use gateway_core::Currency;

use super::{Context, LoggedIn};
use crate::cli::{BalanceArgs, HistoryArgs, PayArgs};
use crate::output::{Table, money, short_did, time};

fn currency(text: Option<&str>) -> anyhow::Result<Option<Currency>> {
    text.map(|c| Currency::parse(c).map_err(|why| anyhow::anyhow!("invalid currency '{c}': {why}"))).transpose()
}

pub(crate) async fn pay(context: &Context, session: &LoggedIn, args: PayArgs) -> anyhow::Result<()> {
    let payment = PaymentRequest {
        from: session.identity.did().clone(),
        to: args.to,
        amount: args.amount,
        currency: currency(args.currency.as_deref())?,
        memo: args.memo,
    };
    let transaction =
        session.client.pay(session.coop()?, &payment, args.idempotency_key.as_deref()).await.context("paying")?;
    // The event the payment appended (none for a replayed answer), which the coop's log proves.
    let event = session.client.last_event_seq();
    context.out.show(&transaction, || {
        let mut text = paid_text(&transaction);
        if let Some(seq) = event {
            text.push_str(&format!(
                "\nevent {seq}: `gatewayctl log proof --seq {seq} --wait` and `gatewayctl log entry --seq {seq}` prove it"
            ));
        }
        text
    })
}

/// `paid 2.5 in hours to did:key:… (transaction …)`.
fn paid_text(transaction: &Transaction) -> String {
    format!(
        "paid {} to {} (transaction {})",
        money(transaction.amount, &transaction.currency),
        transaction.to,
        transaction.id
    )
}

/// `your balance: 2.5 in hours (also 3 in eur)`, or `<account>: …` for another account.
fn balance_text(balance: &Balance, own: bool) -> String {
    let whose = if own { "your balance".to_owned() } else { balance.did.clone() };
    let mut text = format!("{whose}: {}", money(balance.balance, &balance.currency));
    let others: Vec<String> =
        balance.balances.iter().filter(|(c, _)| **c != balance.currency).map(|(c, b)| money(b, c)).collect();
    if !others.is_empty() {
        text.push_str(&format!(" (also {})", others.join(", ")));
    }
    text
}

pub(crate) async fn balance(context: &Context, session: &LoggedIn, args: BalanceArgs) -> anyhow::Result<()> {
    let me = session.identity.did().to_string();
    let account = args.account.unwrap_or_else(|| me.clone());
    let currency = currency(args.currency.as_deref())?;
    let balance = session.client.balance(session.coop()?, &account, currency.as_ref()).await?;
    context.out.show(&balance, || balance_text(&balance, account == me))
}

pub(crate) async fn history(context: &Context, session: &LoggedIn, args: HistoryArgs) -> anyhow::Result<()> {
    let query = HistoryQuery {
        page: PageRequest { limit: Some(args.limit), offset: Some(args.offset) },
        account: args.account,
        currency: currency(args.currency.as_deref())?,
    };
    let page = session.client.history(session.coop()?, &query).await?;
    let me = session.identity.did().to_string();
    let who = |account: &str| if account == me { "you".to_owned() } else { short_did(account) };
    context.out.show(&page, || {
        let mut table = Table::new(&["TIME (UTC)", "FROM", "TO", "AMOUNT", "CURRENCY", "MEMO"]);
        for t in &page.transactions {
            let amount = match (&t.to_currency, t.net_target_amount) {
                (Some(to), Some(net)) => format!("{} → {}", t.amount, money(net, to)),
                _ => t.amount.to_string(),
            };
            table.row(vec![
                time(t.timestamp),
                who(&t.from),
                who(&t.to),
                amount,
                t.currency.clone(),
                t.memo.clone().unwrap_or_default(),
            ]);
        }
        let footer = if page.pagination.has_more {
            format!(
                "\n({} of {}; older ones with --offset {})",
                page.transactions.len(),
                page.pagination.total,
                args.offset + page.transactions.len() as u64
            )
        } else {
            String::new()
        };
        format!("{}{footer}", table.render("no transactions yet"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::Amount;
    use std::collections::BTreeMap;

    #[test]
    fn payments_and_balances_name_the_currency_the_same_way() {
        let transaction: Transaction = serde_json::from_str(
            r#"{"id":"tx1","kind":"payment","from":"did:key:a","to":"did:key:b","amount":1,"currency":"hours","timestamp":0}"#,
        )
        .unwrap();
        assert_eq!(paid_text(&transaction), "paid 1 in hours to did:key:b (transaction tx1)");

        let balance = Balance {
            did: "did:key:a".into(),
            currency: "hours".into(),
            balance: Amount::from_micros(2_500_000),
            balances: BTreeMap::from([
                ("eur".to_owned(), Amount::from_micros(-3_000_000)),
                ("hours".to_owned(), Amount::from_micros(2_500_000)),
            ]),
        };
        assert_eq!(balance_text(&balance, true), "your balance: 2.5 in hours (also -3 in eur)");
        assert_eq!(balance_text(&balance, false), "did:key:a: 2.5 in hours (also -3 in eur)");
    }
}
