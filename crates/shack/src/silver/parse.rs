//! Reading bronze lines, by source and (for payments) by API version. Every line ends as exactly
//! one of: a parsed row, a CSV header, or a quarantine [`Reason`] — never a null, never a panic.
//!
//! The payment parsers live in one place, [`PAYMENT_PARSERS`]: one entry per `api_version`,
//! each saying where every field is read. Supporting a new version is one entry there plus a
//! replay; until then its events are quarantined as `unsupported_api_version`, never guessed at.
//!
//! Money is integer minor units (`i64`), read only from JSON integers (`8167`, never `81.67`
//! nor `"8167"`). FX rates are kept exactly as integer micro-units (`1.371234` → `1371234`, an
//! `i64` scaled by 10^6); a rate with more than six decimals is refused rather than rounded.

use chrono::{DateTime, NaiveDate};
use serde::Serialize;

use super::json::{self, Json};

/// Why silver could not use a bronze line. The string forms are what `silver.quarantine.reason`
/// holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The line's bytes are not UTF-8 (bronze kept them in `_raw_bytes`).
    NotUtf8,
    /// Not JSON (a receiver's truncated line, binary, nesting deeper than the parser allows).
    UnparseableJson,
    /// JSON in which an object holds one key more than once (`{"amount":5,"amount":500}`):
    /// which value the producer meant is not defined, so silver takes neither.
    DuplicateKey,
    /// JSON, but not an object with the event's envelope (`api_version`, `type`, `id`,
    /// `created`; for orders `op` and `ts_ms`) of the right types.
    MissingEnvelope,
    /// An `api_version` with no enabled parser.
    UnsupportedApiVersion,
    /// A `type` other than `charge.succeeded` and `charge.refunded`.
    UnknownEventType,
    MissingChargeId,
    MissingOrderId,
    /// An amount that is not a JSON integer in 1..=[`MAX_AMOUNT_MINOR`] (payments), a negative
    /// or non-integer amount (settlements).
    BadAmount,
    /// A currency outside the accepted ones.
    UnknownCurrency,
    /// A refund event without its refund id.
    MissingRefundId,
    /// Orders: an `lsn` that is not an integer in 0..=i64::MAX.
    MissingLsn,
    /// Orders: an `op` other than `c`, `u`, `d`.
    UnknownOp,
    /// Orders: no row image where the op needs one (`after` for c/u, `before` for d).
    MissingRowImage,
    MissingCustomerId,
    MissingShipRegion,
    /// Orders: `total_minor` not an integer in 0..=[`MAX_AMOUNT_MINOR`].
    BadTotal,
    /// Orders: a status outside created, paid, shipped, cancelled.
    UnknownStatus,
    /// Orders: `created_at` or `updated_at` not an RFC 3339 instant.
    BadTimestamp,
    /// An empty line, or one of nothing but whitespace (CSV or JSON lines).
    EmptyLine,
    /// CSV: not the number of fields the source's header has.
    WrongFieldCount,
    /// CSV: a date that is not `yyyy-mm-dd`.
    BadDate,
    /// FX: a rate that is not a positive decimal with at most six decimals below 1000.
    BadRate,
    /// Settlements: `net_minor` is not `gross_minor - refunds_minor`.
    NetMismatch,
    /// Orders: a change whose `created_at` is not the one its order was first delivered with
    /// (found by the boil, not the parse: it needs silver's row).
    CreatedAtChanged,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 25] = [
        Reason::NotUtf8,
        Reason::UnparseableJson,
        Reason::DuplicateKey,
        Reason::MissingEnvelope,
        Reason::UnsupportedApiVersion,
        Reason::UnknownEventType,
        Reason::MissingChargeId,
        Reason::MissingOrderId,
        Reason::BadAmount,
        Reason::UnknownCurrency,
        Reason::MissingRefundId,
        Reason::MissingLsn,
        Reason::UnknownOp,
        Reason::MissingRowImage,
        Reason::MissingCustomerId,
        Reason::MissingShipRegion,
        Reason::BadTotal,
        Reason::UnknownStatus,
        Reason::BadTimestamp,
        Reason::EmptyLine,
        Reason::WrongFieldCount,
        Reason::BadDate,
        Reason::BadRate,
        Reason::NetMismatch,
        Reason::CreatedAtChanged,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::NotUtf8 => "not_utf8",
            Reason::UnparseableJson => "unparseable_json",
            Reason::DuplicateKey => "duplicate_key",
            Reason::MissingEnvelope => "missing_envelope",
            Reason::UnsupportedApiVersion => "unsupported_api_version",
            Reason::UnknownEventType => "unknown_event_type",
            Reason::MissingChargeId => "missing_charge_id",
            Reason::MissingOrderId => "missing_order_id",
            Reason::BadAmount => "bad_amount",
            Reason::UnknownCurrency => "unknown_currency",
            Reason::MissingRefundId => "missing_refund_id",
            Reason::MissingLsn => "missing_lsn",
            Reason::UnknownOp => "unknown_op",
            Reason::MissingRowImage => "missing_row_image",
            Reason::MissingCustomerId => "missing_customer_id",
            Reason::MissingShipRegion => "missing_ship_region",
            Reason::BadTotal => "bad_total",
            Reason::UnknownStatus => "unknown_status",
            Reason::BadTimestamp => "bad_timestamp",
            Reason::EmptyLine => "empty_line",
            Reason::WrongFieldCount => "wrong_field_count",
            Reason::BadDate => "bad_date",
            Reason::BadRate => "bad_rate",
            Reason::NetMismatch => "net_mismatch",
            Reason::CreatedAtChanged => "created_at_changed",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one bronze line is to silver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    Row(T),
    /// A CSV header line (bronze keeps them as rows): neither data nor quarantine.
    Header,
    Quarantine(Reason),
}

/// The largest amount silver believes, in minor units (one hundred million in major units).
pub const MAX_AMOUNT_MINOR: i64 = 10_000_000_000;

/// Currencies a payment, an order or a settlement may be in (lower case, as silver stores them).
pub const CURRENCIES: [&str; 2] = ["cad", "usd"];

/// Order statuses silver accepts.
pub const STATUSES: [&str; 4] = ["created", "paid", "shipped", "cancelled"];

/// Event types silver stores (mapped from `charge.succeeded` and `charge.refunded`).
pub const EVENT_TYPES: [&str; 2] = ["capture", "refund"];

/// The header line of `fx_rates` files.
pub const FX_HEADER: &str = "rate_date,base,quote,rate";
/// The header line of `settlements` files.
pub const SETTLEMENTS_HEADER: &str = "settlement_date,currency,gross_minor,refunds_minor,net_minor";

/// Where a field of a payment event is read: an expression over the parsed JSON event.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    /// The value at this path of object keys (`data.object.id`).
    Path(&'static [&'static str]),
    /// The first of these that is present and not null.
    Coalesce(&'static [Field]),
    /// `then` when the string at `path` equals `equals`; absent otherwise.
    When {
        path: &'static [&'static str],
        equals: &'static str,
        then: &'static [&'static str],
    },
}

impl Field {
    /// The value this field reads from `j`, when present and not null.
    pub(crate) fn read<'a, 'j>(&self, j: &'a Json<'j>) -> Option<&'a Json<'j>> {
        match self {
            Field::Path(p) => at(j, p),
            Field::Coalesce(fields) => fields.iter().find_map(|f| f.read(j)),
            Field::When { path, equals, then } => (at(j, path).and_then(Json::as_str)
                == Some(*equals))
            .then(|| at(j, then))
            .flatten(),
        }
    }
}

fn at<'a, 'j>(j: &'a Json<'j>, path: &[&str]) -> Option<&'a Json<'j>> {
    let mut v = j;
    for key in path {
        v = v.get(key)?;
    }
    (!v.is_null()).then_some(v)
}

/// How one payments `api_version` is read.
#[derive(Clone, Copy, Debug)]
pub struct PaymentParser {
    pub api_version: &'static str,
    pub charge_id: Field,
    pub refund_id: Field,
    pub order_id: Field,
    pub amount: Field,
    /// Read as a string and lower-cased (`USD` → `usd`) before the accepted-values test.
    pub currency: Field,
}

/// The registry: every payments API version silver understands, and where each field is.
pub const PAYMENT_PARSERS: &[PaymentParser] = &[
    PaymentParser {
        api_version: "2025-11-01",
        charge_id: Field::Path(&["data", "object", "id"]),
        refund_id: Field::Path(&["data", "object", "refund", "id"]),
        order_id: Field::Path(&["data", "object", "order_id"]),
        // A refund's amount is its refund's, never the charge's: a refund whose own amount is
        // missing is quarantined (bad_amount), not booked as a refund of the whole charge.
        amount: Field::Coalesce(&[
            Field::When {
                path: &["type"],
                equals: "charge.refunded",
                then: &["data", "object", "refund", "amount"],
            },
            Field::When {
                path: &["type"],
                equals: "charge.succeeded",
                then: &["data", "object", "amount"],
            },
        ]),
        currency: Field::Path(&["data", "object", "currency"]),
    },
    PaymentParser {
        api_version: "2026-08-01",
        charge_id: Field::Coalesce(&[
            Field::Path(&["data", "object", "charge"]),
            Field::Path(&["data", "object", "id"]),
        ]),
        refund_id: Field::When {
            path: &["data", "object", "object"],
            equals: "refund",
            then: &["data", "object", "id"],
        },
        order_id: Field::Path(&["data", "object", "metadata", "order_id"]),
        amount: Field::Path(&["data", "object", "amount", "value"]),
        currency: Field::Path(&["data", "object", "amount", "currency"]),
    },
];

/// Every API version the registry knows, in registry order.
pub fn known_versions() -> Vec<String> {
    PAYMENT_PARSERS
        .iter()
        .map(|p| p.api_version.to_string())
        .collect()
}

/// `"2025-11-01, 2026-08-01"` → the versions, trimmed, empty items dropped (the form of
/// `SUGAR_PARSERS`).
pub fn parse_version_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

/// The enabled entries of the registry.
#[derive(Clone, Debug)]
pub struct Parsers {
    enabled: Vec<&'static PaymentParser>,
}

impl Parsers {
    /// The entries named in `versions`; a name the registry does not know is returned as the
    /// error (enabling a parser that does not exist is a configuration mistake, not a no-op).
    pub fn enable(versions: &[String]) -> Result<Parsers, String> {
        let mut enabled = Vec::new();
        for v in versions {
            let p = PAYMENT_PARSERS
                .iter()
                .find(|p| p.api_version == v)
                .ok_or_else(|| v.clone())?;
            if !enabled.iter().any(|e: &&PaymentParser| e.api_version == v) {
                enabled.push(p);
            }
        }
        Ok(Parsers { enabled })
    }

    /// Every entry of the registry.
    pub fn all() -> Parsers {
        Parsers {
            enabled: PAYMENT_PARSERS.iter().collect(),
        }
    }

    pub fn versions(&self) -> Vec<String> {
        self.enabled
            .iter()
            .map(|p| p.api_version.to_string())
            .collect()
    }

    fn get(&self, version: &str) -> Option<&'static PaymentParser> {
        self.enabled
            .iter()
            .copied()
            .find(|p| p.api_version == version)
    }
}

/// A parsed payment event (one delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentEvent {
    pub event_id: String,
    /// `capture` or `refund`.
    pub event_type: &'static str,
    pub api_version: String,
    pub charge_id: String,
    pub refund_id: Option<String>,
    pub order_id: String,
    pub amount_minor: i64,
    /// `cad` or `usd`.
    pub currency: &'static str,
    /// `created`, in microseconds since the epoch.
    pub created_at_us: i64,
}

fn nonempty_str<'a>(v: Option<&'a Json<'_>>) -> Option<&'a str> {
    v.and_then(Json::as_str).filter(|s| !s.trim().is_empty())
}

fn accepted(list: &[&'static str], s: &str) -> Option<&'static str> {
    list.iter().copied().find(|c| *c == s)
}

/// The first instant silver accepts (2000-01-01) and the first it refuses (2100-01-01), seconds.
const MIN_EPOCH_S: i64 = 946_684_800;
const MAX_EPOCH_S: i64 = 4_102_444_800;

/// One JSON line: an empty line, text that is not JSON, and JSON that repeats a key in any
/// of its objects are each quarantined with their own reason.
fn json_object(raw: &str) -> Result<Json<'_>, Reason> {
    if raw
        .trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'))
        .is_empty()
    {
        return Err(Reason::EmptyLine);
    }
    let j = json::parse(raw).map_err(|_| Reason::UnparseableJson)?;
    if j.repeated_key().is_some() {
        return Err(Reason::DuplicateKey);
    }
    Ok(j)
}

/// Read one `bronze.payments` line. `raw_is_utf8` is false when bronze flagged the line's bytes
/// as not UTF-8 (`_raw_bytes is not null`).
pub fn parse_payment(raw: &str, raw_is_utf8: bool, parsers: &Parsers) -> Parsed<PaymentEvent> {
    match payment(raw, raw_is_utf8, parsers) {
        Ok(p) => Parsed::Row(p),
        Err(r) => Parsed::Quarantine(r),
    }
}

fn payment(raw: &str, raw_is_utf8: bool, parsers: &Parsers) -> Result<PaymentEvent, Reason> {
    if !raw_is_utf8 {
        return Err(Reason::NotUtf8);
    }
    let j = json_object(raw)?;
    if !j.is_object() {
        return Err(Reason::MissingEnvelope);
    }
    let version = nonempty_str(at(&j, &["api_version"])).ok_or(Reason::MissingEnvelope)?;
    let parser = parsers.get(version).ok_or(Reason::UnsupportedApiVersion)?;
    let kind = nonempty_str(at(&j, &["type"])).ok_or(Reason::MissingEnvelope)?;
    let event_type = match kind {
        "charge.succeeded" => "capture",
        "charge.refunded" => "refund",
        _ => return Err(Reason::UnknownEventType),
    };
    let event_id = nonempty_str(at(&j, &["id"])).ok_or(Reason::MissingEnvelope)?;
    let created = at(&j, &["created"])
        .and_then(Json::as_i64)
        .filter(|c| (MIN_EPOCH_S..MAX_EPOCH_S).contains(c))
        .ok_or(Reason::MissingEnvelope)?;
    let order_id = nonempty_str(parser.order_id.read(&j)).ok_or(Reason::MissingOrderId)?;
    let amount = parser
        .amount
        .read(&j)
        .and_then(Json::as_i64)
        .filter(|a| (1..=MAX_AMOUNT_MINOR).contains(a))
        .ok_or(Reason::BadAmount)?;
    let currency = parser
        .currency
        .read(&j)
        .and_then(Json::as_str)
        .and_then(|c| accepted(&CURRENCIES, &c.to_ascii_lowercase()))
        .ok_or(Reason::UnknownCurrency)?;
    let refund_id = nonempty_str(parser.refund_id.read(&j));
    if event_type == "refund" && refund_id.is_none() {
        return Err(Reason::MissingRefundId);
    }
    let charge_id = nonempty_str(parser.charge_id.read(&j)).ok_or(Reason::MissingChargeId)?;
    Ok(PaymentEvent {
        event_id: event_id.to_string(),
        event_type,
        api_version: parser.api_version.to_string(),
        charge_id: charge_id.to_string(),
        // A capture's refund id is not read: only refunds have one.
        refund_id: (event_type == "refund")
            .then(|| refund_id.map(str::to_string))
            .flatten(),
        order_id: order_id.to_string(),
        amount_minor: amount,
        currency,
        created_at_us: created * 1_000_000,
    })
}

/// A parsed change event of the orders table: the row image it leaves (for a delete, the
/// `before` image, flagged `is_deleted`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderChange {
    pub lsn: i64,
    /// `c`, `u` or `d`.
    pub op: &'static str,
    pub order_id: String,
    pub customer_id: String,
    pub status: &'static str,
    pub currency: &'static str,
    pub total_minor: i64,
    pub ship_region: String,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    /// `ts_ms`, in microseconds.
    pub committed_at_us: i64,
    pub is_deleted: bool,
}

fn instant_us(v: Option<&Json<'_>>) -> Option<i64> {
    let s = v?.as_str()?;
    let t = DateTime::parse_from_rfc3339(s).ok()?;
    let secs = t.timestamp();
    (MIN_EPOCH_S..MAX_EPOCH_S)
        .contains(&secs)
        .then(|| t.timestamp_micros())
}

/// Read one `bronze.orders` line.
pub fn parse_order(raw: &str, raw_is_utf8: bool) -> Parsed<OrderChange> {
    match order(raw, raw_is_utf8) {
        Ok(o) => Parsed::Row(o),
        Err(r) => Parsed::Quarantine(r),
    }
}

fn order(raw: &str, raw_is_utf8: bool) -> Result<OrderChange, Reason> {
    if !raw_is_utf8 {
        return Err(Reason::NotUtf8);
    }
    let j = json_object(raw)?;
    if !j.is_object() {
        return Err(Reason::MissingEnvelope);
    }
    let op = nonempty_str(at(&j, &["op"])).ok_or(Reason::MissingEnvelope)?;
    let ts_ms = at(&j, &["ts_ms"])
        .and_then(Json::as_i64)
        .filter(|t| (MIN_EPOCH_S * 1000..MAX_EPOCH_S * 1000).contains(t))
        .ok_or(Reason::MissingEnvelope)?;
    let lsn = at(&j, &["lsn"])
        .and_then(Json::as_i64)
        .filter(|l| *l >= 0)
        .ok_or(Reason::MissingLsn)?;
    let (op, image) = match op {
        "c" => ("c", "after"),
        "u" => ("u", "after"),
        "d" => ("d", "before"),
        _ => return Err(Reason::UnknownOp),
    };
    let row = at(&j, &[image])
        .filter(|r| r.is_object())
        .ok_or(Reason::MissingRowImage)?;
    let order_id = nonempty_str(at(row, &["order_id"])).ok_or(Reason::MissingOrderId)?;
    let customer_id = nonempty_str(at(row, &["customer_id"])).ok_or(Reason::MissingCustomerId)?;
    let status = at(row, &["status"])
        .and_then(Json::as_str)
        .and_then(|s| accepted(&STATUSES, s))
        .ok_or(Reason::UnknownStatus)?;
    let currency = at(row, &["currency"])
        .and_then(Json::as_str)
        .and_then(|c| accepted(&CURRENCIES, &c.to_ascii_lowercase()))
        .ok_or(Reason::UnknownCurrency)?;
    let total = at(row, &["total_minor"])
        .and_then(Json::as_i64)
        .filter(|t| (0..=MAX_AMOUNT_MINOR).contains(t))
        .ok_or(Reason::BadTotal)?;
    let ship_region = nonempty_str(at(row, &["ship_region"])).ok_or(Reason::MissingShipRegion)?;
    let created = instant_us(at(row, &["created_at"])).ok_or(Reason::BadTimestamp)?;
    let updated = instant_us(at(row, &["updated_at"])).ok_or(Reason::BadTimestamp)?;
    Ok(OrderChange {
        lsn,
        op,
        order_id: order_id.to_string(),
        customer_id: customer_id.to_string(),
        status,
        currency,
        total_minor: total,
        ship_region: ship_region.to_string(),
        created_at_us: created,
        updated_at_us: updated,
        committed_at_us: ts_ms * 1000,
        is_deleted: op == "d",
    })
}

/// A published FX rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FxRate {
    /// Days since 1970-01-01.
    pub rate_date: i32,
    /// ISO code, upper case as published (`USD`).
    pub base: &'static str,
    pub quote: &'static str,
    /// The rate in micro-units: `1.371234` → `1371234`.
    pub rate_micros: i64,
}

/// Currencies an FX row may name (upper case, as the rate files write them).
pub const FX_CURRENCIES: [&str; 2] = ["CAD", "USD"];

/// A CSV line's fields, after dropping one trailing `\r`. `None` for a blank line.
fn csv_fields(raw: &str) -> Option<(String, Vec<&str>)> {
    let line = raw.strip_suffix('\r').unwrap_or(raw);
    if line.trim().is_empty() {
        return None;
    }
    Some((line.to_string(), line.split(',').map(str::trim).collect()))
}

fn days(date: &str) -> Option<i32> {
    let d = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((d - epoch).num_days()).ok()
}

/// `1.371234` → 1371234: digits, optionally a point and at most six digits, in (0, 1000).
pub fn rate_micros(s: &str) -> Option<i64> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty()
        || whole.len() > 3
        || frac.len() > 6
        || !whole.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || (s.contains('.') && frac.is_empty())
    {
        return None;
    }
    let mut scaled = whole.parse::<i64>().ok()? * 1_000_000;
    if !frac.is_empty() {
        let pad = 10i64.pow(6 - frac.len() as u32);
        scaled += frac.parse::<i64>().ok()? * pad;
    }
    (scaled > 0).then_some(scaled)
}

/// Read one `bronze.fx_rates` line.
pub fn parse_fx(raw: &str, raw_is_utf8: bool) -> Parsed<FxRate> {
    if !raw_is_utf8 {
        return Parsed::Quarantine(Reason::NotUtf8);
    }
    let Some((line, f)) = csv_fields(raw) else {
        return Parsed::Quarantine(Reason::EmptyLine);
    };
    if line == FX_HEADER {
        return Parsed::Header;
    }
    let [date, base, quote, rate] = f.as_slice() else {
        return Parsed::Quarantine(Reason::WrongFieldCount);
    };
    let Some(rate_date) = days(date) else {
        return Parsed::Quarantine(Reason::BadDate);
    };
    let (Some(base), Some(quote)) = (
        accepted(&FX_CURRENCIES, base),
        accepted(&FX_CURRENCIES, quote),
    ) else {
        return Parsed::Quarantine(Reason::UnknownCurrency);
    };
    if base == quote {
        return Parsed::Quarantine(Reason::UnknownCurrency);
    }
    let Some(rate_micros) = rate_micros(rate) else {
        return Parsed::Quarantine(Reason::BadRate);
    };
    Parsed::Row(FxRate {
        rate_date,
        base,
        quote,
        rate_micros,
    })
}

/// One settlement report row: the processor's totals of a UTC day and currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// Days since 1970-01-01.
    pub settlement_date: i32,
    pub currency: &'static str,
    pub gross_minor: i64,
    pub refunds_minor: i64,
    pub net_minor: i64,
}

fn minor(s: &str) -> Option<i64> {
    let ok = !s.is_empty()
        && s.bytes()
            .enumerate()
            .all(|(i, c)| c.is_ascii_digit() || (i == 0 && c == b'-'));
    if !ok {
        return None;
    }
    s.parse::<i64>()
        .ok()
        .filter(|v| (-MAX_AMOUNT_MINOR..=MAX_AMOUNT_MINOR).contains(v))
}

/// Read one `bronze.settlements` line.
pub fn parse_settlement(raw: &str, raw_is_utf8: bool) -> Parsed<Settlement> {
    if !raw_is_utf8 {
        return Parsed::Quarantine(Reason::NotUtf8);
    }
    let Some((line, f)) = csv_fields(raw) else {
        return Parsed::Quarantine(Reason::EmptyLine);
    };
    if line == SETTLEMENTS_HEADER {
        return Parsed::Header;
    }
    let [date, currency, gross, refunds, net] = f.as_slice() else {
        return Parsed::Quarantine(Reason::WrongFieldCount);
    };
    let Some(settlement_date) = days(date) else {
        return Parsed::Quarantine(Reason::BadDate);
    };
    let Some(currency) = accepted(&CURRENCIES, &currency.to_ascii_lowercase()) else {
        return Parsed::Quarantine(Reason::UnknownCurrency);
    };
    let (Some(gross), Some(refunds), Some(net)) = (minor(gross), minor(refunds), minor(net)) else {
        return Parsed::Quarantine(Reason::BadAmount);
    };
    if gross < 0 || refunds < 0 {
        return Parsed::Quarantine(Reason::BadAmount);
    }
    if gross - refunds != net {
        return Parsed::Quarantine(Reason::NetMismatch);
    }
    Parsed::Row(Settlement {
        settlement_date,
        currency,
        gross_minor: gross,
        refunds_minor: refunds,
        net_minor: net,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CHARGE: &str = r#"{"id":"evt_1","type":"charge.succeeded","api_version":"2025-11-01","created":1786712452,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":8167,"currency":"usd"}}}"#;
    const V1_REFUND: &str = r#"{"id":"evt_1","type":"charge.refunded","api_version":"2025-11-01","created":1786712452,"data":{"object":{"id":"ch_1","order_id":"ord_1","amount":8167,"currency":"usd","refund":{"id":"re_1","amount":2000}}}}"#;
    const V2_CHARGE: &str = r#"{"id":"evt_1","type":"charge.succeeded","api_version":"2026-08-01","created":1786712452,"data":{"object":{"id":"ch_1","amount":{"value":8167,"currency":"USD"},"metadata":{"order_id":"ord_1"}}}}"#;
    const V2_REFUND: &str = r#"{"id":"evt_1","type":"charge.refunded","api_version":"2026-08-01","created":1786712452,"data":{"object":{"object":"refund","id":"re_1","charge":"ch_1","amount":{"value":2000,"currency":"USD"},"metadata":{"order_id":"ord_1"}}}}"#;
    const ORDER_C: &str = r#"{"op":"c","lsn":7,"before":null,"after":{"order_id":"ord_1","customer_id":"cus_1","status":"created","currency":"cad","total_minor":100,"ship_region":"CA-NS","created_at":"2026-08-01T00:00:00.000Z","updated_at":"2026-08-01T00:00:00.000Z"},"ts_ms":1785542400000}"#;
    const ORDER_D: &str = r#"{"op":"d","lsn":9,"before":{"order_id":"ord_1","customer_id":"cus_1","status":"created","currency":"cad","total_minor":100,"ship_region":"CA-NS","created_at":"2026-08-01T00:00:00.000Z","updated_at":"2026-08-01T00:00:00.000Z"},"after":null,"ts_ms":1785542400000}"#;

    fn pay(raw: &str) -> Parsed<PaymentEvent> {
        parse_payment(raw, true, &Parsers::all())
    }

    fn reason(p: Parsed<impl std::fmt::Debug>) -> Reason {
        match p {
            Parsed::Quarantine(r) => r,
            other => panic!("expected quarantine, got {other:?}"),
        }
    }

    #[test]
    fn the_four_payment_shapes_read_the_same_facts() {
        let Parsed::Row(c1) = pay(V1_CHARGE) else {
            panic!("v1 charge")
        };
        let Parsed::Row(c2) = pay(V2_CHARGE) else {
            panic!("v2 charge")
        };
        assert_eq!(c1.amount_minor, 8167);
        assert_eq!(c1.currency, "usd");
        assert_eq!(c1.order_id, "ord_1");
        assert_eq!(c1.charge_id, "ch_1");
        assert_eq!(c1.refund_id, None);
        assert_eq!(c1.event_type, "capture");
        assert_eq!(c1.created_at_us, 1_786_712_452_000_000);
        assert_eq!(
            (c2.api_version.as_str(), c2.amount_minor, c2.currency),
            ("2026-08-01", 8167, "usd")
        );
        assert_eq!(
            (&c1.order_id, &c1.charge_id, c1.refund_id.clone()),
            (&c2.order_id, &c2.charge_id, c2.refund_id.clone())
        );
        let Parsed::Row(r1) = pay(V1_REFUND) else {
            panic!("v1 refund")
        };
        let Parsed::Row(r2) = pay(V2_REFUND) else {
            panic!("v2 refund")
        };
        for r in [&r1, &r2] {
            assert_eq!(r.event_type, "refund");
            assert_eq!(r.amount_minor, 2000);
            assert_eq!(r.refund_id.as_deref(), Some("re_1"));
            assert_eq!(r.charge_id, "ch_1");
            assert_eq!(r.order_id, "ord_1");
            assert_eq!(r.currency, "usd");
        }
    }

    #[test]
    fn a_disabled_version_is_unsupported_not_guessed() {
        let only_v1 = Parsers::enable(&["2025-11-01".to_string()]).expect("known");
        assert_eq!(
            parse_payment(V2_CHARGE, true, &only_v1),
            Parsed::Quarantine(Reason::UnsupportedApiVersion)
        );
        assert!(matches!(
            parse_payment(V1_CHARGE, true, &only_v1),
            Parsed::Row(_)
        ));
        assert_eq!(
            reason(pay(&V1_CHARGE.replace("2025-11-01", "2027-01-01"))),
            Reason::UnsupportedApiVersion
        );
        assert_eq!(
            Parsers::enable(&["2027-01-01".to_string()]).err(),
            Some("2027-01-01".to_string())
        );
        assert_eq!(
            parse_version_list(" 2025-11-01, ,2026-08-01 "),
            vec!["2025-11-01", "2026-08-01"]
        );
    }

    #[test]
    fn payment_reasons() {
        let cases: Vec<(String, Reason)> = vec![
            (V1_CHARGE[..60].to_string(), Reason::UnparseableJson),
            (String::new(), Reason::EmptyLine),
            (" \t\r".into(), Reason::EmptyLine),
            ("\u{a0}".into(), Reason::UnparseableJson),
            // A repeated key, at the top or deep down, whichever value would be read.
            (
                V1_CHARGE.replace(r#""amount":8167"#, r#""amount":8167,"amount":81670"#),
                Reason::DuplicateKey,
            ),
            (
                V1_CHARGE.replace(r#""id":"evt_1","#, r#""id":"evt_1","id":"evt_2","#),
                Reason::DuplicateKey,
            ),
            (
                V1_CHARGE.replace(
                    r#""currency":"usd""#,
                    r#""currency":"usd","x":{"y":1,"y":1}"#,
                ),
                Reason::DuplicateKey,
            ),
            ("[1,2]".into(), Reason::MissingEnvelope),
            (
                V1_CHARGE.replace(r#""api_version":"2025-11-01","#, ""),
                Reason::MissingEnvelope,
            ),
            (
                V1_CHARGE.replace("charge.succeeded", "charge.disputed"),
                Reason::UnknownEventType,
            ),
            (
                V1_CHARGE.replace(r#""id":"evt_1","#, ""),
                Reason::MissingEnvelope,
            ),
            (
                V1_CHARGE.replace("1786712452", "\"1786712452\""),
                Reason::MissingEnvelope,
            ),
            (
                V1_CHARGE.replace(r#""order_id":"ord_1","#, ""),
                Reason::MissingOrderId,
            ),
            (
                V1_CHARGE.replace(r#""order_id":"ord_1""#, r#""order_id":"""#),
                Reason::MissingOrderId,
            ),
            (V1_CHARGE.replace("8167", "-8167"), Reason::BadAmount),
            (V1_CHARGE.replace("8167", "0"), Reason::BadAmount),
            (V1_CHARGE.replace("8167", "81.67"), Reason::BadAmount),
            (V1_CHARGE.replace("8167", "\"8167\""), Reason::BadAmount),
            (
                V1_CHARGE.replace("8167", "99999999999999999999999"),
                Reason::BadAmount,
            ),
            (
                V1_CHARGE.replace("\"usd\"", "\"eur\""),
                Reason::UnknownCurrency,
            ),
            (
                V1_CHARGE.replace("\"usd\"", "null"),
                Reason::UnknownCurrency,
            ),
            (
                V1_REFUND.replace(r#""id":"re_1","#, ""),
                Reason::MissingRefundId,
            ),
            // The charge's amount is no stand-in for a refund's own.
            (
                V1_REFUND.replace(r#","amount":2000"#, ""),
                Reason::BadAmount,
            ),
            (
                V1_REFUND.replace(r#""amount":2000"#, r#""amount":null"#),
                Reason::BadAmount,
            ),
            (
                V2_REFUND.replace(r#""object":"refund","#, ""),
                Reason::MissingRefundId,
            ),
            (
                V2_CHARGE.replace(
                    r#""metadata":{"order_id":"ord_1"}"#,
                    r#""order_id":"ord_1""#,
                ),
                Reason::MissingOrderId,
            ),
            (
                V1_CHARGE.replace(r#""id":"ch_1","#, ""),
                Reason::MissingChargeId,
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(reason(pay(&raw)), want, "{raw}");
        }
        assert_eq!(
            parse_payment(V1_CHARGE, false, &Parsers::all()),
            Parsed::Quarantine(Reason::NotUtf8)
        );
    }

    #[test]
    fn orders_read_the_image_their_op_leaves() {
        let Parsed::Row(c) = parse_order(ORDER_C, true) else {
            panic!("c")
        };
        assert_eq!(
            (c.lsn, c.op, c.status, c.is_deleted),
            (7, "c", "created", false)
        );
        assert_eq!(c.total_minor, 100);
        assert_eq!(c.committed_at_us, 1_785_542_400_000_000);
        let Parsed::Row(d) = parse_order(ORDER_D, true) else {
            panic!("d")
        };
        assert_eq!(
            (d.lsn, d.op, d.status, d.is_deleted),
            (9, "d", "created", true)
        );
    }

    #[test]
    fn order_reasons() {
        let cases: Vec<(String, Reason)> = vec![
            (ORDER_C[..40].to_string(), Reason::UnparseableJson),
            ("\n".into(), Reason::EmptyLine),
            (
                ORDER_C.replace(
                    r#""status":"created","#,
                    r#""status":"created","status":"shipped","#,
                ),
                Reason::DuplicateKey,
            ),
            ("\"c\"".into(), Reason::MissingEnvelope),
            (ORDER_C.replace(r#""op":"c","#, ""), Reason::MissingEnvelope),
            (
                ORDER_C.replace(r#","ts_ms":1785542400000"#, ""),
                Reason::MissingEnvelope,
            ),
            (ORDER_C.replace(r#""lsn":7,"#, ""), Reason::MissingLsn),
            (
                ORDER_C.replace(r#""lsn":7,"#, r#""lsn":-7,"#),
                Reason::MissingLsn,
            ),
            (
                ORDER_C.replace(r#""lsn":7,"#, r#""lsn":"7","#),
                Reason::MissingLsn,
            ),
            (
                ORDER_C.replace(r#""op":"c""#, r#""op":"r""#),
                Reason::UnknownOp,
            ),
            (
                ORDER_C.replace(r#""op":"c""#, r#""op":"d""#),
                Reason::MissingRowImage,
            ),
            (
                ORDER_C.replace(r#""order_id":"ord_1","#, ""),
                Reason::MissingOrderId,
            ),
            (
                ORDER_C.replace(r#""customer_id":"cus_1","#, ""),
                Reason::MissingCustomerId,
            ),
            (
                ORDER_C.replace("\"created\"", "\"lost\""),
                Reason::UnknownStatus,
            ),
            (
                ORDER_C.replace("\"cad\"", "\"gbp\""),
                Reason::UnknownCurrency,
            ),
            (ORDER_C.replace(":100,", ":-100,"), Reason::BadTotal),
            (ORDER_C.replace(":100,", ":1.5,"), Reason::BadTotal),
            (
                ORDER_C.replace(r#""ship_region":"CA-NS","#, ""),
                Reason::MissingShipRegion,
            ),
            (
                ORDER_C.replace(
                    "2026-08-01T00:00:00.000Z\",\"updated",
                    "yesterday\",\"updated",
                ),
                Reason::BadTimestamp,
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(reason(parse_order(&raw, true)), want, "{raw}");
        }
        assert_eq!(reason(parse_order(ORDER_C, false)), Reason::NotUtf8);
    }

    #[test]
    fn fx_rows_headers_and_reasons() {
        assert_eq!(parse_fx(FX_HEADER, true), Parsed::Header);
        assert_eq!(
            parse_fx("rate_date,base,quote,rate\r", true),
            Parsed::Header
        );
        assert_eq!(
            parse_fx("2026-08-12,USD,CAD,1.371234", true),
            Parsed::Row(FxRate {
                rate_date: 20_677,
                base: "USD",
                quote: "CAD",
                rate_micros: 1_371_234
            })
        );
        assert_eq!(rate_micros("1.37"), Some(1_370_000));
        assert_eq!(rate_micros("2"), Some(2_000_000));
        for (raw, want) in [
            ("", Reason::EmptyLine),
            ("2026-08-12,USD,CAD", Reason::WrongFieldCount),
            ("2026-08-12,USD,CAD,1.3,x", Reason::WrongFieldCount),
            ("2026-13-12,USD,CAD,1.371234", Reason::BadDate),
            ("2026-08-12,USD,EUR,1.371234", Reason::UnknownCurrency),
            ("2026-08-12,USD,USD,1.371234", Reason::UnknownCurrency),
            ("2026-08-12,USD,CAD,1.3712345", Reason::BadRate),
            ("2026-08-12,USD,CAD,-1.371234", Reason::BadRate),
            ("2026-08-12,USD,CAD,0.000000", Reason::BadRate),
            ("2026-08-12,USD,CAD,1e3", Reason::BadRate),
            ("2026-08-12,USD,CAD,1.", Reason::BadRate),
            ("2026-08-12,USD,CAD,99999.1", Reason::BadRate),
        ] {
            assert_eq!(parse_fx(raw, true), Parsed::Quarantine(want), "{raw}");
        }
        assert_eq!(
            parse_fx(FX_HEADER, false),
            Parsed::Quarantine(Reason::NotUtf8)
        );
    }

    #[test]
    fn settlement_rows_headers_and_reasons() {
        assert_eq!(parse_settlement(SETTLEMENTS_HEADER, true), Parsed::Header);
        assert_eq!(
            parse_settlement("2026-08-12,usd,1000,200,800", true),
            Parsed::Row(Settlement {
                settlement_date: 20_677,
                currency: "usd",
                gross_minor: 1000,
                refunds_minor: 200,
                net_minor: 800
            })
        );
        assert!(matches!(
            parse_settlement("2026-08-12,cad,0,300,-300", true),
            Parsed::Row(_)
        ));
        for (raw, want) in [
            (" ", Reason::EmptyLine),
            ("2026-08-12,usd,1000,200", Reason::WrongFieldCount),
            ("12/08/2026,usd,1000,200,800", Reason::BadDate),
            ("2026-08-12,eur,1000,200,800", Reason::UnknownCurrency),
            ("2026-08-12,usd,10.00,200,800", Reason::BadAmount),
            ("2026-08-12,usd,-1000,200,-1200", Reason::BadAmount),
            ("2026-08-12,usd,99999999999999999999,0,0", Reason::BadAmount),
            ("2026-08-12,usd,1000,200,801", Reason::NetMismatch),
        ] {
            assert_eq!(
                parse_settlement(raw, true),
                Parsed::Quarantine(want),
                "{raw}"
            );
        }
    }

    /// A deterministic generator (splitmix64) for the fuzz test.
    struct Mix(u64);
    impl Mix {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n.max(1) as u64) as usize
        }
    }

    /// A malformed variant of a valid line.
    fn mutate(rng: &mut Mix, base: &str) -> (Vec<u8>, &'static str) {
        let b = base.as_bytes();
        match rng.below(12) {
            0 => (b[..rng.below(b.len())].to_vec(), "truncated"),
            1 => (
                (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect(),
                "binary",
            ),
            2 => {
                let mut v = b.to_vec();
                let i = rng.below(v.len());
                v[i] = rng.next_u64() as u8;
                (v, "flipped byte")
            }
            3 => {
                let depth = 100 + rng.below(5000);
                let s = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                (s.into_bytes(), "deep nesting")
            }
            4 => {
                let depth = 1 + rng.below(400);
                let s = format!(
                    r#"{{"id":"evt_1","type":"charge.succeeded","api_version":"2025-11-01","created":1786712452,"data":{{"object":{}1{}}}}}"#,
                    r#"{"a":"#.repeat(depth),
                    "}".repeat(depth)
                );
                (s.into_bytes(), "deep object")
            }
            5 => {
                let pad = "x".repeat(1 << (10 + rng.below(11)));
                (base.replacen("evt_1", &pad, 1).into_bytes(), "huge")
            }
            6 => {
                let amount = [
                    "-1",
                    "0",
                    "-9223372036854775808",
                    "9223372036854775807",
                    "1e9",
                    "NaN",
                    "\"12\"",
                    "null",
                    "true",
                    "[]",
                    "{}",
                    "18446744073709551616",
                    "0.5",
                ][rng.below(13)];
                (
                    base.replace("8167", amount)
                        .replace(":100,", &format!(":{amount},"))
                        .into_bytes(),
                    "amount",
                )
            }
            7 => {
                let v = [
                    "",
                    "2024-01-01",
                    "2026-08-01 ",
                    "2025-11-01\u{0}",
                    "V2",
                    "null",
                ][rng.below(6)];
                (
                    base.replace("2025-11-01", v)
                        .replace("2026-08-01", v)
                        .into_bytes(),
                    "version",
                )
            }
            8 => {
                let wrong = ["1", "[]", "{}", "null", "\"\"", "true", "-3.5"][rng.below(7)];
                let keys = [
                    "id",
                    "type",
                    "created",
                    "data",
                    "object",
                    "order_id",
                    "metadata",
                    "amount",
                    "currency",
                    "refund",
                    "op",
                    "lsn",
                    "after",
                    "before",
                    "status",
                    "total_minor",
                    "ts_ms",
                ];
                let key = keys[rng.below(keys.len())];
                let s = base.replacen(
                    &format!("\"{key}\":"),
                    &format!("\"{key}\":{wrong},\"_{key}\":"),
                    1,
                );
                (s.into_bytes(), "wrong type")
            }
            9 => {
                let cut = rng.below(b.len());
                let mut v = b[..cut].to_vec();
                v.extend_from_slice(&b[cut..].iter().rev().copied().collect::<Vec<_>>());
                (v, "shuffled tail")
            }
            10 => (b",,,,\r".repeat(rng.below(5) + 1), "commas"),
            _ => {
                let mut v = b.to_vec();
                v.extend_from_slice(b);
                (v, "two lines in one")
            }
        }
    }

    /// The borrowed tree the parsers read answers every lookup as `serde_json::Value` would,
    /// on the valid lines and on every malformed variant the fuzz test makes of them.
    #[test]
    fn fuzzed_lines_parse_as_serde_json_values_do() {
        let bases = [V1_CHARGE, V1_REFUND, V2_CHARGE, V2_REFUND, ORDER_C, ORDER_D];
        let mut rng = Mix(0x0DD_BA11);
        let (mut parsed, mut refused) = (0usize, 0usize);
        for round in 0..20_000 {
            let base = bases[round % bases.len()];
            let bytes = if round < bases.len() {
                base.as_bytes().to_vec()
            } else {
                mutate(&mut rng, base).0
            };
            let raw = String::from_utf8_lossy(&bytes);
            match (
                json::parse(&raw),
                serde_json::from_str::<serde_json::Value>(&raw),
            ) {
                (Ok(j), Ok(v)) => {
                    assert!(json::tests::same(&j, &v), "{raw}: {j:?} vs {v:?}");
                    parsed += 1;
                }
                (Err(_), Err(_)) => refused += 1,
                (j, v) => panic!("{raw:?}: borrowed {j:?}, serde_json {v:?}"),
            }
        }
        assert!(
            parsed > 1_000 && refused > 1_000,
            "{parsed} parsed, {refused} refused"
        );
    }

    #[test]
    fn fuzz_malformed_lines_end_in_quarantine_with_a_reason() {
        const ROUNDS: usize = 20_000;
        let bases = [
            V1_CHARGE,
            V1_REFUND,
            V2_CHARGE,
            V2_REFUND,
            ORDER_C,
            ORDER_D,
            "2026-08-12,USD,CAD,1.371234",
            "2026-08-12,usd,1000,200,800",
        ];
        let parsers = Parsers::all();
        let mut rng = Mix(0x005E_ED0F_B011);
        let mut tried = 0usize;
        let mut quarantined = 0usize;
        for _ in 0..ROUNDS {
            let base = bases[rng.below(bases.len())];
            let (bytes, what) = mutate(&mut rng, base);
            let utf8 = std::str::from_utf8(&bytes).is_ok();
            let raw = String::from_utf8_lossy(&bytes);
            tried += 1;
            // Every parser sees every input: each must answer, and an answer that is a row must
            // hold only values silver accepts.
            match parse_payment(&raw, utf8, &parsers) {
                Parsed::Row(p) => {
                    assert!(
                        (1..=MAX_AMOUNT_MINOR).contains(&p.amount_minor),
                        "{what}: {raw}"
                    );
                    assert!(CURRENCIES.contains(&p.currency));
                    assert!(
                        !p.event_id.is_empty() && !p.order_id.is_empty() && !p.charge_id.is_empty()
                    );
                    assert!(p.event_type != "refund" || p.refund_id.is_some());
                }
                Parsed::Quarantine(r) => {
                    quarantined += 1;
                    assert!(!r.as_str().is_empty());
                }
                Parsed::Header => panic!("a payment line is never a header"),
            }
            match parse_order(&raw, utf8) {
                Parsed::Row(o) => {
                    assert!(o.lsn >= 0 && o.total_minor >= 0, "{what}: {raw}");
                    assert!(STATUSES.contains(&o.status));
                }
                Parsed::Quarantine(_) => quarantined += 1,
                Parsed::Header => panic!("an order line is never a header"),
            }
            match parse_fx(&raw, utf8) {
                Parsed::Row(r) => assert!(r.rate_micros > 0),
                Parsed::Quarantine(_) => quarantined += 1,
                Parsed::Header => {}
            }
            match parse_settlement(&raw, utf8) {
                Parsed::Row(s) => assert_eq!(s.gross_minor - s.refunds_minor, s.net_minor),
                Parsed::Quarantine(_) => quarantined += 1,
                Parsed::Header => {}
            }
            // Malformed means: the mutations that always break a line must be quarantined by
            // the parser of the line's own source.
            let json = base.starts_with('{');
            if matches!(what, "binary" | "deep nesting" | "commas") || (json && what == "truncated")
            {
                let own = if base.starts_with("{\"op\"") {
                    matches!(parse_order(&raw, utf8), Parsed::Quarantine(_))
                } else if json {
                    matches!(parse_payment(&raw, utf8, &parsers), Parsed::Quarantine(_))
                } else if base.contains("USD") {
                    !matches!(parse_fx(&raw, utf8), Parsed::Row(_))
                } else {
                    !matches!(parse_settlement(&raw, utf8), Parsed::Row(_))
                };
                assert!(own, "{what} of {base} was accepted: {raw:?}");
            }
        }
        assert_eq!(tried, ROUNDS);
        assert!(
            quarantined > ROUNDS * 3,
            "{quarantined} of {} answers",
            ROUNDS * 4
        );
        println!(
            "fuzz: {tried} inputs, {} parser calls, {quarantined} quarantined",
            tried * 4
        );
    }
}
