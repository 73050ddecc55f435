//! The shop: a deterministic stream of listing events written in transactions of realistic
//! length.
//!
//! Three kinds of writer share one `listing_event` table:
//!
//! * **shoppers** — every event is its own one-row transaction: a shopper lists, reprices or
//!   delists an item, or a buyer reserves, buys or returns one. All sales are here.
//! * **professional sellers** — a bulk importer writes one row per item, about 1.4 s apart,
//!   in one transaction (tens to a few thousand items: seconds to an hour).
//! * **the wholesale partner** — the intake job writes a pallet (1,500 to 12,000 items) at about
//!   1.05 s an item, in one transaction running up to three and a half hours.
//!
//! Each row is stamped (`event_ts`) when it is written; the transaction commits
//! [`COMMIT_MS`] after its last write, and all its rows become visible together at commit plus
//! the replication lag. A one-row transaction therefore takes exactly two seconds.
//!
//! Everything is integer arithmetic on a [`SplitMix64`] stream per process (shoppers, sellers,
//! pallets) and per transaction, so the stream is identical on every run and machine.

use std::collections::VecDeque;

use crate::rng::{SplitMix64, mix, threshold};

/// Milliseconds between a transaction's last write and its commit.
pub const COMMIT_MS: i64 = 2_000;
const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// Who wrote a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxKind {
    /// One-row transactions from the shop front (listings by shoppers, and every sale).
    Shopper,
    /// Bulk imports by professional sellers.
    ProSeller,
    /// The wholesale partner's pallets.
    Wholesale,
}

impl TxKind {
    /// Every kind, in report order.
    pub const ALL: [TxKind; 3] = [TxKind::Shopper, TxKind::ProSeller, TxKind::Wholesale];

    /// The writer's name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TxKind::Shopper => "shopper",
            TxKind::ProSeller => "pro_seller",
            TxKind::Wholesale => "wholesale",
        }
    }

    /// Parse a writer's name.
    pub fn parse(s: &str) -> Option<TxKind> {
        TxKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Position in [`TxKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The writer of a seller's rows.
    pub fn of_seller(seller_id: i64) -> TxKind {
        if seller_id == WHOLESALE_SELLER {
            TxKind::Wholesale
        } else if seller_id > PRO_SELLER_BASE {
            TxKind::ProSeller
        } else {
            TxKind::Shopper
        }
    }
}

/// What an event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    ListingCreated,
    PriceChanged,
    Delisted,
    Reserved,
    Sold,
    Returned,
}

impl EventType {
    /// Every type, in report order.
    pub const ALL: [EventType; 6] = [
        EventType::ListingCreated,
        EventType::PriceChanged,
        EventType::Delisted,
        EventType::Reserved,
        EventType::Sold,
        EventType::Returned,
    ];

    /// The name stored in the `event_type` column.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::ListingCreated => "listing_created",
            EventType::PriceChanged => "price_changed",
            EventType::Delisted => "delisted",
            EventType::Reserved => "reserved",
            EventType::Sold => "sold",
            EventType::Returned => "returned",
        }
    }

    /// Parse an `event_type` value.
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Position in [`EventType::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Sales, reservations and returns (the money side) as opposed to listing events.
    pub fn is_sale_side(self) -> bool {
        matches!(
            self,
            EventType::Reserved | EventType::Sold | EventType::Returned
        )
    }
}

/// One row of `listing_event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Dense from 0 in transaction start order: the model's unique key.
    pub event_id: i64,
    /// When the application stamped the row (ms since the epoch, UTC).
    pub event_ts_ms: i64,
    pub listing_id: i64,
    pub seller_id: i64,
    pub event_type: EventType,
    /// Listing price, or the sale price for sales (integer cents).
    pub price_cents: i64,
}

impl Row {
    /// Who wrote the row, by its seller: shoppers are sellers `1..=250,000`, professional
    /// sellers `900,001..=900,400`, the wholesale partner `999,999`. (The table holds the
    /// story's columns only; the writer is implied, the transaction is not stored at all.)
    pub fn writer(&self) -> TxKind {
        TxKind::of_seller(self.seller_id)
    }
}

/// One source transaction and its rows (stamped in order).
#[derive(Clone, Debug)]
pub struct Transaction {
    pub tx_id: i64,
    pub kind: TxKind,
    /// The first row's stamp.
    pub start_ms: i64,
    /// The commit instant; rows become visible at `commit_ms + lag`.
    pub commit_ms: i64,
    pub rows: Vec<Row>,
}

impl Transaction {
    /// Commit minus first write: how long the transaction held its rows back.
    pub fn duration_ms(&self) -> i64 {
        self.commit_ms - self.start_ms
    }
}

/// The window and seed of one generated season.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// 00:00 UTC of the first day, ms since the epoch.
    pub start_ms: i64,
    /// Day of the week of the first day (0 = Monday).
    pub first_weekday: u32,
    /// Transactions start during this many days.
    pub days: u32,
    pub seed: u64,
}

// ---- The shop's shape. Only durations and the schedule drive the losses; the rest is colour.

/// Shopper one-row transactions per day, on average.
const SHOPPER_PER_DAY: u128 = 29_600;
/// Shopper activity by hour (UTC), relative.
const SHOPPER_HOURS: [u128; 24] = [
    20, 12, 8, 6, 6, 10, 20, 35, 45, 50, 52, 55, 58, 55, 52, 50, 52, 58, 65, 72, 78, 70, 55, 35,
];
/// Shopper activity by weekday (Monday first), per mille.
const SHOPPER_WEEKDAYS: [u128; 7] = [950, 930, 960, 1_000, 1_050, 1_080, 1_030];
/// Shopper event mix, per mille, in [`EventType::ALL`] order.
const SHOPPER_EVENTS: [u64; 6] = [330, 400, 100, 50, 100, 20];
/// Bernoulli trials per second for shopper arrivals (at most this many a second).
const SHOPPER_TRIALS: u64 = 4;

/// Professional bulk imports per day, on average.
const PRO_PER_DAY: u128 = 175;
/// Import activity by hour (UTC), relative: office hours and a nightly batch.
const PRO_HOURS: [u128; 24] = [
    4, 10, 12, 8, 3, 3, 6, 14, 20, 22, 22, 20, 16, 20, 22, 22, 20, 16, 12, 8, 6, 5, 4, 4,
];
/// Import activity by weekday (Monday first), per mille.
const PRO_WEEKDAYS: [u128; 7] = [1_150, 1_150, 1_100, 1_100, 1_050, 750, 700];
/// Import sizes: most are small, one in fifty is a whole catalogue.
const PRO_SMALL: (i64, i64) = (10, 350);
const PRO_LARGE: (i64, i64) = (350, 2_500);
const PRO_LARGE_PER_MILLE: u64 = 20;
/// Milliseconds per imported item: 1.4 s ± 0.3 s.
const PRO_GAP_MS: (i64, i64) = (1_100, 1_700);
/// Share of imports that create listings (the rest reprice), per mille.
const PRO_NEW_STOCK_PER_MILLE: u64 = 400;
const PRO_SELLERS: i64 = 400;
const PRO_SELLER_BASE: i64 = 900_000;
const SHOPPER_SELLERS: i64 = 250_000;

/// Pallets arrive on Tuesdays and Thursdays, the intake job starting between 09:00 and 13:00.
const PALLET_WEEKDAYS: [u32; 2] = [1, 3];
const PALLET_FIRST_HOUR: u64 = 9;
const PALLET_HOURS: u64 = 4;
const PALLET_ITEMS: (i64, i64) = (1_500, 12_000);
/// Milliseconds per pallet item: 1.05 s ± 0.1 s.
const PALLET_GAP_MS: (i64, i64) = (950, 1_150);
const WHOLESALE_SELLER: i64 = 999_999;

const STREAM_SHOPPERS: u64 = 1;
const STREAM_PRO: u64 = 2;
const STREAM_PALLETS: u64 = 3;
const STREAM_ROWS: u64 = 4;

#[derive(Clone, Copy, Debug)]
enum Spec {
    Shopper,
    Pro { items: i64 },
    Pallet { items: i64 },
}

/// The season's transactions, in start order (ties in a fixed order), one hour at a time.
#[derive(Clone, Debug)]
pub struct Generator {
    cfg: GeneratorConfig,
    hour: i64,
    buffer: VecDeque<Transaction>,
    shoppers: SplitMix64,
    pro: SplitMix64,
    pallets: SplitMix64,
    /// Today's pallet, until its hour comes.
    pallet: Option<(i64, i64)>,
    next_tx_id: i64,
    next_event_id: i64,
}

impl Generator {
    /// A generator for `cfg`'s window.
    pub fn new(cfg: GeneratorConfig) -> Self {
        let seed = cfg.seed;
        Generator {
            cfg,
            hour: 0,
            buffer: VecDeque::new(),
            shoppers: SplitMix64::stream(seed, STREAM_SHOPPERS),
            pro: SplitMix64::stream(seed, STREAM_PRO),
            pallets: SplitMix64::stream(seed, STREAM_PALLETS),
            pallet: None,
            next_tx_id: 0,
            next_event_id: 0,
        }
    }

    /// The end of the window (no transaction starts at or after it).
    pub fn end_ms(&self) -> i64 {
        self.cfg.start_ms + i64::from(self.cfg.days) * DAY_MS
    }

    fn weekday(&self, hour: i64) -> usize {
        ((i64::from(self.cfg.first_weekday) + hour / 24) % 7) as usize
    }

    fn fill_hour(&mut self) {
        let h = self.hour;
        self.hour += 1;
        let hour_start = self.cfg.start_ms + h * HOUR_MS;
        let hod = (h % 24) as usize;
        let wd = self.weekday(h);
        let mut specs: Vec<(i64, Spec)> = Vec::new();

        // Shoppers: up to SHOPPER_TRIALS arrivals a second.
        let hours_total: u128 = SHOPPER_HOURS.iter().sum();
        let shopper_t = threshold(
            SHOPPER_PER_DAY * SHOPPER_HOURS[hod] * 24 * SHOPPER_WEEKDAYS[wd],
            hours_total * 1_000 * 86_400 * u128::from(SHOPPER_TRIALS),
        );
        for s in 0..3_600 {
            for _ in 0..SHOPPER_TRIALS {
                if self.shoppers.chance(shopper_t) {
                    let at = hour_start + s * 1_000 + self.shoppers.below(1_000) as i64;
                    specs.push((at, Spec::Shopper));
                }
            }
        }

        // Professional imports: at most one starting a minute.
        let pro_total: u128 = PRO_HOURS.iter().sum();
        let pro_t = threshold(
            PRO_PER_DAY * PRO_HOURS[hod] * 24 * PRO_WEEKDAYS[wd],
            pro_total * 1_000 * 1_440,
        );
        for m in 0..60 {
            if self.pro.chance(pro_t) {
                let at = hour_start + m * 60_000 + self.pro.below(60_000) as i64;
                let (lo, hi) = if self.pro.below(1_000) < PRO_LARGE_PER_MILLE {
                    PRO_LARGE
                } else {
                    PRO_SMALL
                };
                let items = log_uniform(&mut self.pro, lo, hi);
                specs.push((at, Spec::Pro { items }));
            }
        }

        // The wholesale pallet: drawn at midnight for the whole day, started in its hour.
        if hod == 0 {
            let hour = PALLET_FIRST_HOUR + self.pallets.below(PALLET_HOURS);
            let at = self.pallets.below(HOUR_MS as u64) as i64;
            let items = self.pallets.between(PALLET_ITEMS.0, PALLET_ITEMS.1);
            if PALLET_WEEKDAYS.contains(&(wd as u32)) {
                self.pallet = Some((hour_start + hour as i64 * HOUR_MS + at, items));
            }
        }
        if let Some((at, items)) = self.pallet.filter(|(at, _)| *at < hour_start + HOUR_MS) {
            self.pallet = None;
            specs.push((at, Spec::Pallet { items }));
        }

        // Stable by start: shoppers, then imports, then pallets at equal instants.
        specs.sort_by_key(|(at, _)| *at);
        for (at, spec) in specs {
            let tx = self.materialize(at, spec);
            self.buffer.push_back(tx);
        }
    }

    fn materialize(&mut self, start_ms: i64, spec: Spec) -> Transaction {
        let tx_id = self.next_tx_id;
        self.next_tx_id += 1;
        let mut r = SplitMix64::new(mix(mix(self.cfg.seed, STREAM_ROWS), tx_id as u64));
        let first_event = self.next_event_id;
        let existing = |r: &mut SplitMix64| 1 + r.below(first_event.max(1) as u64) as i64;
        let mut rows = Vec::new();
        let kind = match spec {
            Spec::Shopper => {
                let event_type = EventType::ALL[r.weighted(&SHOPPER_EVENTS)];
                let listing_id = if event_type == EventType::ListingCreated {
                    first_event + 1
                } else {
                    existing(&mut r)
                };
                rows.push(Row {
                    event_id: first_event,
                    event_ts_ms: start_ms,
                    listing_id,
                    seller_id: r.between(1, SHOPPER_SELLERS),
                    event_type,
                    price_cents: r.between(300, 15_000),
                });
                TxKind::Shopper
            }
            Spec::Pro { items } => {
                let seller = PRO_SELLER_BASE + r.between(1, PRO_SELLERS);
                let new_stock = r.below(1_000) < PRO_NEW_STOCK_PER_MILLE;
                let mut ts = start_ms;
                for i in 0..items {
                    if i > 0 {
                        ts += r.between(PRO_GAP_MS.0, PRO_GAP_MS.1);
                    }
                    let event_id = first_event + i;
                    let (event_type, listing_id) = if new_stock {
                        (EventType::ListingCreated, event_id + 1)
                    } else {
                        (EventType::PriceChanged, existing(&mut r))
                    };
                    rows.push(Row {
                        event_id,
                        event_ts_ms: ts,
                        listing_id,
                        seller_id: seller,
                        event_type,
                        price_cents: r.between(500, 40_000),
                    });
                }
                TxKind::ProSeller
            }
            Spec::Pallet { items } => {
                let mut ts = start_ms;
                for i in 0..items {
                    if i > 0 {
                        ts += r.between(PALLET_GAP_MS.0, PALLET_GAP_MS.1);
                    }
                    let event_id = first_event + i;
                    rows.push(Row {
                        event_id,
                        event_ts_ms: ts,
                        listing_id: event_id + 1,
                        seller_id: WHOLESALE_SELLER,
                        event_type: EventType::ListingCreated,
                        price_cents: r.between(200, 5_000),
                    });
                }
                TxKind::Wholesale
            }
        };
        self.next_event_id += rows.len() as i64;
        let last = rows.last().map_or(start_ms, |row| row.event_ts_ms);
        Transaction {
            tx_id,
            kind,
            start_ms,
            commit_ms: last + COMMIT_MS,
            rows,
        }
    }
}

impl Iterator for Generator {
    type Item = Transaction;

    fn next(&mut self) -> Option<Transaction> {
        let hours = i64::from(self.cfg.days) * 24;
        while self.buffer.is_empty() && self.hour < hours {
            self.fill_hour();
        }
        self.buffer.pop_front()
    }
}

/// Roughly log-uniform in `lo..=hi` with integers only: a uniform octave, then uniform in it.
fn log_uniform(r: &mut SplitMix64, lo: i64, hi: i64) -> i64 {
    let mut octaves = Vec::new();
    let mut a = lo.max(1);
    while a < hi {
        let b = (a * 2).min(hi);
        octaves.push((a, b));
        a = b;
    }
    if octaves.is_empty() {
        return lo;
    }
    // Weight each octave by its share of ln(hi / lo): full octaves 1024, the last one less.
    let weights: Vec<u64> = octaves
        .iter()
        .map(|(a, b)| ((b - a) * 1_024 / a) as u64)
        .collect();
    let (a, b) = octaves[r.weighted(&weights)];
    r.between(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(days: u32) -> GeneratorConfig {
        GeneratorConfig {
            start_ms: 1_780_444_800_000, // 2026-06-03, a Wednesday
            first_weekday: 2,
            days,
            seed: 42,
        }
    }

    #[test]
    fn same_seed_same_stream() {
        let a: Vec<_> = Generator::new(cfg(1))
            .map(|t| (t.tx_id, t.commit_ms, t.rows))
            .collect();
        let b: Vec<_> = Generator::new(cfg(1))
            .map(|t| (t.tx_id, t.commit_ms, t.rows))
            .collect();
        assert_eq!(a, b);
        assert!(a.len() > 20_000);
    }

    #[test]
    fn transactions_have_the_promised_shape() {
        let mut next_event = 0;
        let mut last_start = i64::MIN;
        let mut pallets = 0;
        for tx in Generator::new(cfg(3)) {
            assert!(tx.start_ms >= last_start, "start order");
            last_start = tx.start_ms;
            assert_eq!(tx.rows[0].event_ts_ms, tx.start_ms);
            let last = tx.rows.last().map(|r| r.event_ts_ms).unwrap_or_default();
            assert_eq!(tx.commit_ms, last + COMMIT_MS);
            for r in &tx.rows {
                assert_eq!(r.event_id, next_event);
                next_event += 1;
                assert_eq!(r.writer(), tx.kind);
                if r.event_type.is_sale_side() {
                    assert_eq!(tx.rows.len(), 1, "sales are one-row transactions");
                }
            }
            match tx.kind {
                TxKind::Shopper => assert_eq!(tx.rows.len(), 1),
                TxKind::ProSeller => assert!((10..=2_500).contains(&tx.rows.len())),
                TxKind::Wholesale => {
                    pallets += 1;
                    assert!((1_500..=12_000).contains(&tx.rows.len()));
                }
            }
        }
        // Wednesday, Thursday, Friday: one pallet (Thursday).
        assert_eq!(pallets, 1);
    }
}
