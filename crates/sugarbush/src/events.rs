//! The exact bytes of the two JSON-lines sources. Serialised from structs (never from a
//! `serde_json::Value`), so the key order is fixed by the code and cannot change with a
//! feature another crate turns on.

use serde::Serialize;

/// `2025-11-01`: every CAD event, and USD events created before the US account moved.
pub const API_V1: &str = "2025-11-01";
/// `2026-08-01`: USD events created from 2026-08-17T00:00:00Z on.
pub const API_V2: &str = "2026-08-01";

/// One row image of the orders table.
#[derive(Debug, Serialize)]
pub(crate) struct RowImage<'a> {
    pub order_id: &'a str,
    pub customer_id: &'a str,
    pub status: &'a str,
    pub currency: &'a str,
    pub total_minor: i64,
    pub ship_region: &'a str,
    pub created_at: &'a str,
    pub updated_at: &'a str,
}

/// A Debezium-style change event: `op` c/u/d, the LSN, full before and after images.
#[derive(Debug, Serialize)]
pub(crate) struct ChangeEvent<'a> {
    pub op: &'a str,
    pub lsn: u64,
    pub before: Option<RowImage<'a>>,
    pub after: Option<RowImage<'a>>,
    pub ts_ms: i64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Envelope<'a, O: Serialize> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub api_version: &'a str,
    pub created: i64,
    pub data: Data<O>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Data<O: Serialize> {
    pub object: O,
}

/// 2025-11-01 charge: `{"id","order_id","amount","currency"}`.
#[derive(Debug, Serialize)]
pub(crate) struct V1Charge<'a> {
    pub id: &'a str,
    pub order_id: &'a str,
    pub amount: i64,
    pub currency: &'a str,
}

/// 2025-11-01 refund: the charge, with a `refund` sub-object carrying the refund's id and amount.
#[derive(Debug, Serialize)]
pub(crate) struct V1RefundedCharge<'a> {
    pub id: &'a str,
    pub order_id: &'a str,
    pub amount: i64,
    pub currency: &'a str,
    pub refund: V1Refund<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct V1Refund<'a> {
    pub id: &'a str,
    pub amount: i64,
}

/// 2026-08-01 money: `{"value": 8167, "currency": "USD"}`.
#[derive(Debug, Serialize)]
pub(crate) struct V2Amount<'a> {
    pub value: i64,
    pub currency: &'a str,
}

#[derive(Debug, Serialize)]
pub(crate) struct V2Metadata<'a> {
    pub order_id: &'a str,
}

/// 2026-08-01 charge: the order id moved under `metadata`, the amount became an object.
#[derive(Debug, Serialize)]
pub(crate) struct V2Charge<'a> {
    pub id: &'a str,
    pub amount: V2Amount<'a>,
    pub metadata: V2Metadata<'a>,
}

/// 2026-08-01 refund: an object of its own, pointing at its charge.
#[derive(Debug, Serialize)]
pub(crate) struct V2Refund<'a> {
    pub object: &'a str,
    pub id: &'a str,
    pub charge: &'a str,
    pub amount: V2Amount<'a>,
    pub metadata: V2Metadata<'a>,
}

/// What a payment event says, independent of its shape.
#[derive(Debug, Clone)]
pub(crate) struct PaymentFacts<'a> {
    pub event_id: &'a str,
    pub refund: bool,
    pub v2: bool,
    pub created_s: i64,
    pub order_id: &'a str,
    pub charge_id: &'a str,
    pub charge_amount: i64,
    pub refund_id: &'a str,
    pub refund_amount: i64,
    /// `cad` or `usd`.
    pub currency: &'a str,
}

/// Appends the event's JSON (no newline) to `out`.
pub(crate) fn write_payment(out: &mut Vec<u8>, f: &PaymentFacts<'_>) -> serde_json::Result<()> {
    let kind = if f.refund {
        "charge.refunded"
    } else {
        "charge.succeeded"
    };
    let upper = f.currency.to_ascii_uppercase();
    let api_version = if f.v2 { API_V2 } else { API_V1 };
    macro_rules! envelope {
        ($object:expr) => {
            serde_json::to_writer(
                &mut *out,
                &Envelope {
                    id: f.event_id,
                    kind,
                    api_version,
                    created: f.created_s,
                    data: Data { object: $object },
                },
            )
        };
    }
    match (f.v2, f.refund) {
        (false, false) => envelope!(V1Charge {
            id: f.charge_id,
            order_id: f.order_id,
            amount: f.charge_amount,
            currency: f.currency,
        }),
        (false, true) => envelope!(V1RefundedCharge {
            id: f.charge_id,
            order_id: f.order_id,
            amount: f.charge_amount,
            currency: f.currency,
            refund: V1Refund {
                id: f.refund_id,
                amount: f.refund_amount,
            },
        }),
        (true, false) => envelope!(V2Charge {
            id: f.charge_id,
            amount: V2Amount {
                value: f.charge_amount,
                currency: &upper,
            },
            metadata: V2Metadata {
                order_id: f.order_id,
            },
        }),
        (true, true) => envelope!(V2Refund {
            object: "refund",
            id: f.refund_id,
            charge: f.charge_id,
            amount: V2Amount {
                value: f.refund_amount,
                currency: &upper,
            },
            metadata: V2Metadata {
                order_id: f.order_id,
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(refund: bool, v2: bool) -> PaymentFacts<'static> {
        PaymentFacts {
            event_id: "evt_1",
            refund,
            v2,
            created_s: 1_786_712_452,
            order_id: "ord_1",
            charge_id: "ch_1",
            charge_amount: 8167,
            refund_id: "re_1",
            refund_amount: 2000,
            currency: "usd",
        }
    }

    fn line(f: &PaymentFacts<'_>) -> String {
        let mut v = Vec::new();
        write_payment(&mut v, f).expect("serialises");
        String::from_utf8(v).expect("utf8")
    }

    #[test]
    fn the_four_shapes() {
        assert_eq!(
            line(&facts(false, false)),
            r#"{"id":"evt_1","type":"charge.succeeded","api_version":"2025-11-01","created":1786712452,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":8167,"currency":"usd"}}}"#
        );
        assert_eq!(
            line(&facts(true, false)),
            r#"{"id":"evt_1","type":"charge.refunded","api_version":"2025-11-01","created":1786712452,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":8167,"currency":"usd","refund":{"id":"re_1","amount":2000}}}}"#
        );
        assert_eq!(
            line(&facts(false, true)),
            r#"{"id":"evt_1","type":"charge.succeeded","api_version":"2026-08-01","created":1786712452,"data":{"object":{"id":"ch_1","amount":{"value":8167,"currency":"USD"},"metadata":{"order_id":"ord_1"}}}}"#
        );
        assert_eq!(
            line(&facts(true, true)),
            r#"{"id":"evt_1","type":"charge.refunded","api_version":"2026-08-01","created":1786712452,"data":{"object":{"object":"refund","id":"re_1","charge":"ch_1","amount":{"value":2000,"currency":"USD"},"metadata":{"order_id":"ord_1"}}}}"#
        );
    }

    #[test]
    fn change_events_keep_their_key_order() {
        let row = RowImage {
            order_id: "ord_1",
            customer_id: "cus_1",
            status: "created",
            currency: "cad",
            total_minor: 100,
            ship_region: "CA-NS",
            created_at: "2026-08-01T00:00:00.000Z",
            updated_at: "2026-08-01T00:00:00.000Z",
        };
        let ev = ChangeEvent {
            op: "d",
            lsn: 7,
            before: Some(row),
            after: None,
            ts_ms: 5,
        };
        let s = serde_json::to_string(&ev).expect("serialises");
        assert_eq!(
            s,
            r#"{"op":"d","lsn":7,"before":{"order_id":"ord_1","customer_id":"cus_1","status":"created","currency":"cad","total_minor":100,"ship_region":"CA-NS","created_at":"2026-08-01T00:00:00.000Z","updated_at":"2026-08-01T00:00:00.000Z"},"after":null,"ts_ms":5}"#
        );
    }
}
