//! Route handlers, one module per area. Each handler carries its OpenAPI description
//! (`#[utoipa::path]`), and its request and response DTOs live beside it: domain types are not
//! wire types.

pub mod auth;
pub mod common;
pub mod compute;
pub mod coops;
pub mod export;
pub mod governance;
pub mod health;
pub mod identity;
pub mod ledger;
pub mod log;
pub mod notifications;
pub mod trust;

#[cfg(test)]
mod tests {
    //! The events a WebSocket client receives and the API's answers describe the same records:
    //! where the specification gives them one shape, it must stay one shape.

    use gateway_core::{Amount, CoopId, Currency, Did, Role};
    use gateway_domain::events::CoopEvent;
    use gateway_domain::ports::{ConversionLeg, CoopSettings, MemberRecord, TransactionKind, TransactionRecord};

    use super::coops::{MemberDto, SettingsDto};
    use super::ledger::TransactionDto;

    const ALICE: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    /// The answer's exact text: the event must match it byte for byte, digits included.
    fn as_text<T: serde::Serialize>(value: &T) -> gateway_core::JsonText {
        gateway_core::JsonText::of(value).unwrap()
    }

    #[test]
    fn payment_events_have_the_shape_of_a_transaction_answer() {
        let amount = |t: &str| Amount::parse_decimal(t).unwrap();
        let plain = TransactionRecord {
            id: "t1".into(),
            coop_id: CoopId::parse("c").unwrap(),
            kind: TransactionKind::Payment,
            from: ALICE.into(),
            to: "did:key:bob".into(),
            amount: amount("999999999999.999999"),
            currency: Currency::parse("hours").unwrap(),
            memo: Some("rent".into()),
            timestamp: 9,
            conversion: None,
            request_signature: None,
            batch_id: None,
        };
        let converted = TransactionRecord {
            kind: TransactionKind::Conversion,
            conversion: Some(ConversionLeg {
                to_currency: Currency::parse("eur").unwrap(),
                rate: amount("1.5"),
                gross_target_amount: amount("3"),
                fee_amount: amount("0.03"),
                net_target_amount: amount("2.97"),
            }),
            ..plain.clone()
        };
        let batched = TransactionRecord { batch_id: Some("b1".into()), ..plain.clone() };
        for record in [&plain, &converted, &batched] {
            assert_eq!(CoopEvent::PaymentCreated(record).data().unwrap(), as_text(&TransactionDto::from(record)));
        }
    }

    #[test]
    fn member_and_settings_events_have_the_shape_of_their_answers() {
        for credit_limit in [None, Some(Amount::parse_decimal("-25.5").unwrap())] {
            let member =
                MemberRecord { did: Did::parse(ALICE).unwrap(), role: Role::Member, joined_at: 3, credit_limit };
            assert_eq!(CoopEvent::MemberAdded(&member).data().unwrap(), as_text(&MemberDto::from(&member)));
            assert_eq!(CoopEvent::RoleUpdated(&member).data().unwrap(), as_text(&MemberDto::from(&member)));
        }
        let settings = CoopSettings { conversion_fee_ppm: 2_500, quorum_percent: 66, ..CoopSettings::default() };
        assert_eq!(CoopEvent::SettingsUpdated(&settings).data().unwrap(), as_text(&SettingsDto::from(&settings)));
    }
}
