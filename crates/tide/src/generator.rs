//! The shop: a deterministic stream of listing events written in transactions of realistic
//! length.
//!
//! Three kinds of writer share one `listing_event` table:
//!
//! * **shoppers** — every event is its own one-row transaction: a shopper lists, reprices or
//!   delists an item, or a buyer reserves, buys or returns one. All sales are here.
//! * **professional sellers** — a bulk importer writes one row per item, about 1.4 s apart,
//!   in one transaction (eight to three thousand items: seconds to an hour and ten minutes).
//! * **the wholesale partner** — on Thursdays the intake job writes a pallet at about 1.05 s an
//!   item, in one transaction: 1,500–2,500 items in early June, growing with the partner's
//!   business to 4,350–7,250 by the end of August (up to about two hours); the story's
//!   27 August pallet of 12,000 items (three and a half hours) is placed by hand.
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
    /// The pallet placed by hand ([`BigPallet`]).
    pub placed_by_hand: bool,
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
    /// The pallet placed by hand (the story's 27 August pallet), when it starts in the window.
    pub big_pallet: Option<BigPallet>,
}

// ---- The shop's shape, calibrated to the story's figures (4,340,393 rows over ninety days,
// 2,662,587 of them one-row consumer events; see the crate's README section and the report's
// "against the story" notes). Only durations and the schedule drive the losses; prices, hours and
// weekdays are colour.

/// Shopper one-row transactions per day, on average.
const SHOPPER_PER_DAY: u128 = 29_600;
/// Shopper activity by hour (UTC), relative.
const SHOPPER_HOURS: [u128; 24] = [
    20, 12, 8, 6, 6, 10, 20, 35, 45, 50, 52, 55, 58, 55, 52, 50, 52, 58, 65, 72, 78, 70, 55, 35,
];
/// Shopper activity by weekday (Monday first), per mille: a little quieter at the weekend.
const SHOPPER_WEEKDAYS: [u128; 7] = [1_040, 1_030, 1_030, 1_020, 1_000, 950, 930];
/// Shopper event mix, per mille, in [`EventType::ALL`] order: about 2,640 sales a day.
const SHOPPER_EVENTS: [u64; 6] = [195, 386, 60, 239, 89, 31];
/// Bernoulli trials per second for shopper arrivals (at most this many a second).
const SHOPPER_TRIALS: u64 = 4;
/// Per mille of shopper events (repricing, reserving, buying, delisting) that name a piece of
/// bulk stock — a professional import's or a pallet's item — rather than another shopper's
/// listing: one in five. The story's stock sells slowly: twelve days after the 27 August
/// pallet the shop still lists all 12,000 of its items, "slow stock" is what the repricing job
/// marks down, and its 70,434 listings missing at the end are nearly all of the 24,248 missing
/// at the change plus the 47,833 never recorded since (all of them stock: one-row
/// transactions lose nothing).
const SHOPPER_ON_STOCK_PER_MILLE: u64 = 200;
/// Shopper prices and sale prices, cents (about €29 a sale).
const SHOPPER_PRICE: (i64, i64) = (300, 5_580);

/// Professional bulk imports per day, on average.
const PRO_PER_DAY: u128 = 400;
/// Import activity by hour (UTC), relative: office hours and a nightly batch.
const PRO_HOURS: [u128; 24] = [
    4, 10, 12, 8, 3, 3, 6, 14, 20, 22, 22, 20, 16, 20, 22, 22, 20, 16, 12, 8, 6, 5, 4, 4,
];
/// Import activity by weekday (Monday first), per mille.
const PRO_WEEKDAYS: [u128; 7] = [1_150, 1_150, 1_100, 1_100, 1_050, 750, 700];
/// Import sizes (roughly log-uniform): most are small, one in fifty is a whole catalogue (up to
/// half an hour), and about one in three thousand a catalogue of over an hour.
const PRO_SMALL: (i64, i64) = (8, 120);
const PRO_LARGE: (i64, i64) = (100, 1_300);
const PRO_LARGE_PER_MILLION: u64 = 20_000;
const PRO_HUGE: (i64, i64) = (1_300, 3_000);
const PRO_HUGE_PER_MILLION: u64 = 300;
/// Milliseconds per imported item: 1.4 s ± 0.3 s.
const PRO_GAP_MS: (i64, i64) = (1_100, 1_700);
/// What an import does, per mille: new stock, repricing, delisting.
const PRO_KINDS: [u64; 3] = [300, 650, 50];
/// Professional prices, cents.
const PRO_PRICE: (i64, i64) = (500, 4_000);
const PRO_SELLERS: i64 = 400;
const PRO_SELLER_BASE: i64 = 900_000;
const SHOPPER_SELLERS: i64 = 250_000;

/// A pallet arrives on Thursdays, the intake job starting between 09:00 and 13:00.
const PALLET_WEEKDAYS: [u32; 1] = [3];
const PALLET_FIRST_HOUR: u64 = 9;
const PALLET_HOURS: u64 = 4;
/// Items on a pallet at the start of the season, before its growth.
const PALLET_ITEMS: (i64, i64) = (1_500, 2_500);
/// The partner's pallets grow through the season: by this many per mille of their starting size
/// over [`SEASON_HOURS`] (so 4,350–7,250 items by the end of August), on from there.
const PALLET_GROWTH_PER_MILLE: i64 = 1_900;
/// The story's season: ninety days.
const SEASON_HOURS: i64 = 90 * 24;
/// Milliseconds per pallet item: 1.05 s ± 0.1 s.
const PALLET_GAP_MS: (i64, i64) = (950, 1_150);
/// Pallet prices, cents.
const PALLET_PRICE: (i64, i64) = (200, 3_000);
const WHOLESALE_SELLER: i64 = 999_999;

const STREAM_SHOPPERS: u64 = 1;
const STREAM_PRO: u64 = 2;
const STREAM_PALLETS: u64 = 3;
const STREAM_ROWS: u64 = 4;
const STREAM_BIG_PALLET: u64 = 5;
const STREAM_POOL: u64 = 6;

/// One pallet placed by hand: the story's 27 August pallet (12,000 items committed at 00:40:00,
/// Figure 1). It replaces the regular pallet of the day it commits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BigPallet {
    /// The commit instant (ms since the epoch); the intake starts about `items × 1.05 s` before.
    pub commit_ms: i64,
    pub items: i64,
}

#[derive(Clone, Copy, Debug)]
enum Spec {
    Shopper,
    Pro { items: i64 },
    Pallet { items: i64 },
    BigPallet,
}

/// What a professional import does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProKind {
    NewStock,
    Reprice,
    Delist,
}

/// The listings the shop shows, as the writers see them: a listing can be repriced, reserved,
/// sold or delisted only once the transaction that created it has committed, and a sold or
/// delisted listing leaves the shop. (So the catalogue the report counts is a real one.)
///
/// The shelf keeps two kinds of listing apart: what shoppers listed themselves, one item at a
/// time, and the stock the bulk writers put up (professional imports and the partner's pallets).
/// Shoppers act on each other's listings, and only [`SHOPPER_ON_STOCK_PER_MILLE`] of their
/// events in a thousand name a piece of stock; professional imports reprice and delist
/// anywhere, as before.
#[derive(Clone, Debug, Default)]
struct Shelf {
    /// Listed by shoppers.
    live: Vec<i64>,
    /// Put up by professional imports and pallets.
    stock: Vec<i64>,
    /// Listings created by transactions not committed yet: (commit, tx, ids, stock?), earliest
    /// first.
    pending: std::collections::BinaryHeap<std::cmp::Reverse<Pending>>,
    /// The most recent sales (a return refers to one of them).
    sold: VecDeque<i64>,
}

/// Listings created by one transaction: its commit, its id, the listings, whether they are stock.
type Pending = (i64, i64, Vec<i64>, bool);

const RECENT_SALES: usize = 4_096;

/// Which of the shelf's two lists a pick is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Shoppers,
    Stock,
}

impl Shelf {
    /// Put on the shelf what committed at or before `t`.
    fn release(&mut self, t: i64) {
        while self
            .pending
            .peek()
            .is_some_and(|std::cmp::Reverse((c, _, _, _))| *c <= t)
        {
            if let Some(std::cmp::Reverse((_, _, ids, stock))) = self.pending.pop() {
                if stock {
                    self.stock.extend(ids);
                } else {
                    self.live.extend(ids);
                }
            }
        }
    }

    fn list(&mut self, side: Side) -> &mut Vec<i64> {
        match side {
            Side::Shoppers => &mut self.live,
            Side::Stock => &mut self.stock,
        }
    }

    /// Anywhere on the shelf, uniformly (what a professional import acts on).
    fn pick_any(&self, r: &mut SplitMix64) -> Option<(Side, usize)> {
        let n = self.live.len() + self.stock.len();
        (n > 0).then(|| {
            let i = r.below(n as u64) as usize;
            if i < self.live.len() {
                (Side::Shoppers, i)
            } else {
                (Side::Stock, i - self.live.len())
            }
        })
    }

    /// What a shopper acts on: another shopper's listing, but
    /// [`SHOPPER_ON_STOCK_PER_MILLE`] times in a thousand a piece of stock (either, when the
    /// other list is empty).
    fn pick_shopper(&mut self, r: &mut SplitMix64) -> Option<(Side, usize)> {
        let first = if r.below(1_000) < SHOPPER_ON_STOCK_PER_MILLE {
            Side::Stock
        } else {
            Side::Shoppers
        };
        let other = match first {
            Side::Shoppers => Side::Stock,
            Side::Stock => Side::Shoppers,
        };
        let side = if self.list(first).is_empty() {
            other
        } else {
            first
        };
        let n = self.list(side).len() as u64;
        (n > 0).then(|| (side, r.below(n) as usize))
    }

    /// A live listing that stays live.
    fn touch(&mut self, at: Option<(Side, usize)>) -> Option<i64> {
        at.map(|(side, i)| self.list(side)[i])
    }

    /// A live listing that leaves the shop.
    fn take(&mut self, at: Option<(Side, usize)>) -> Option<i64> {
        at.map(|(side, i)| self.list(side).swap_remove(i))
    }
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
    pool: SplitMix64,
    /// Today's pallet, until its hour comes.
    pallet: Option<(i64, i64)>,
    /// The pallet placed by hand: its start and its item gaps (drawn up front, so that it
    /// commits at the instant asked for).
    big: Option<(i64, Vec<i64>)>,
    shelf: Shelf,
    next_tx_id: i64,
    next_event_id: i64,
}

impl Generator {
    /// A generator for `cfg`'s window.
    pub fn new(cfg: GeneratorConfig) -> Self {
        let seed = cfg.seed;
        let big = cfg.big_pallet.map(|b| {
            let mut r = SplitMix64::stream(seed, STREAM_BIG_PALLET);
            let gaps: Vec<i64> = (1..b.items.max(1))
                .map(|_| r.between(PALLET_GAP_MS.0, PALLET_GAP_MS.1))
                .collect();
            let start = b.commit_ms - COMMIT_MS - gaps.iter().sum::<i64>();
            (start, gaps)
        });
        let window = cfg.start_ms..cfg.start_ms + i64::from(cfg.days) * DAY_MS;
        let big = big.filter(|(start, _)| window.contains(start));
        Generator {
            cfg,
            hour: 0,
            buffer: VecDeque::new(),
            shoppers: SplitMix64::stream(seed, STREAM_SHOPPERS),
            pro: SplitMix64::stream(seed, STREAM_PRO),
            pallets: SplitMix64::stream(seed, STREAM_PALLETS),
            pool: SplitMix64::stream(seed, STREAM_POOL),
            pallet: None,
            big,
            shelf: Shelf::default(),
            next_tx_id: 0,
            next_event_id: 0,
        }
    }

    /// The end of the window (no transaction starts at or after it).
    pub fn end_ms(&self) -> i64 {
        self.cfg.start_ms + i64::from(self.cfg.days) * DAY_MS
    }

    /// The start of the pallet placed by hand, when it is in the window.
    pub fn big_pallet_start_ms(&self) -> Option<i64> {
        self.big.as_ref().map(|(s, _)| *s)
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
                let roll = self.pro.below(1_000_000);
                let (lo, hi) = if roll < PRO_HUGE_PER_MILLION {
                    PRO_HUGE
                } else if roll < PRO_HUGE_PER_MILLION + PRO_LARGE_PER_MILLION {
                    PRO_LARGE
                } else {
                    PRO_SMALL
                };
                let items = log_uniform(&mut self.pro, lo, hi);
                specs.push((at, Spec::Pro { items }));
            }
        }

        // The wholesale pallet: drawn at midnight for the whole day, started in its hour; the
        // pallet placed by hand replaces the regular pallet of the day it commits on.
        if hod == 0 {
            let hour = PALLET_FIRST_HOUR + self.pallets.below(PALLET_HOURS);
            let at = self.pallets.below(HOUR_MS as u64) as i64;
            let items =
                self.pallets.between(PALLET_ITEMS.0, PALLET_ITEMS.1) * pallet_growth_pm(h) / 1_000;
            let replaced = self.cfg.big_pallet.is_some_and(|b| {
                (hour_start..hour_start + DAY_MS).contains(&b.commit_ms) && self.big.is_some()
            });
            if PALLET_WEEKDAYS.contains(&(wd as u32)) && !replaced {
                self.pallet = Some((hour_start + hour as i64 * HOUR_MS + at, items));
            }
        }
        if let Some((at, items)) = self.pallet.filter(|(at, _)| *at < hour_start + HOUR_MS) {
            self.pallet = None;
            specs.push((at, Spec::Pallet { items }));
        }
        if let Some(at) = self
            .big_pallet_start_ms()
            .filter(|s| (hour_start..hour_start + HOUR_MS).contains(s))
        {
            specs.push((at, Spec::BigPallet));
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
        self.shelf.release(start_ms);
        let mut r = SplitMix64::new(mix(mix(self.cfg.seed, STREAM_ROWS), tx_id as u64));
        let first_event = self.next_event_id;
        let mut rows = Vec::new();
        let mut created = Vec::new();
        let kind = match spec {
            Spec::Shopper => {
                let mut event_type = EventType::ALL[r.weighted(&SHOPPER_EVENTS)];
                let mut price_cents = r.between(SHOPPER_PRICE.0, SHOPPER_PRICE.1);
                let listing = match event_type {
                    EventType::ListingCreated => None,
                    EventType::PriceChanged | EventType::Reserved => {
                        let at = self.shelf.pick_shopper(&mut self.pool);
                        self.shelf.touch(at)
                    }
                    EventType::Delisted | EventType::Sold => {
                        let at = self.shelf.pick_shopper(&mut self.pool);
                        self.shelf.take(at)
                    }
                    EventType::Returned => {
                        let n = self.shelf.sold.len() as u64;
                        (n > 0).then(|| self.shelf.sold[self.pool.below(n) as usize])
                    }
                };
                let listing_id = match listing {
                    Some(id) => id,
                    // Nothing to act on yet: the shopper lists something instead.
                    None => {
                        event_type = EventType::ListingCreated;
                        price_cents = r.between(SHOPPER_PRICE.0, SHOPPER_PRICE.1);
                        first_event + 1
                    }
                };
                match event_type {
                    EventType::ListingCreated => created.push(listing_id),
                    EventType::Sold => {
                        self.shelf.sold.push_back(listing_id);
                        if self.shelf.sold.len() > RECENT_SALES {
                            self.shelf.sold.pop_front();
                        }
                    }
                    _ => {}
                }
                rows.push(Row {
                    event_id: first_event,
                    event_ts_ms: start_ms,
                    listing_id,
                    seller_id: r.between(1, SHOPPER_SELLERS),
                    event_type,
                    price_cents,
                });
                TxKind::Shopper
            }
            Spec::Pro { items } => {
                let seller = PRO_SELLER_BASE + r.between(1, PRO_SELLERS);
                let what =
                    [ProKind::NewStock, ProKind::Reprice, ProKind::Delist][r.weighted(&PRO_KINDS)];
                let mut ts = start_ms;
                for i in 0..items {
                    if i > 0 {
                        ts += r.between(PRO_GAP_MS.0, PRO_GAP_MS.1);
                    }
                    let event_id = first_event + i;
                    let existing = match what {
                        ProKind::NewStock => None,
                        ProKind::Reprice => {
                            let at = self.shelf.pick_any(&mut self.pool);
                            self.shelf.touch(at)
                        }
                        ProKind::Delist => {
                            let at = self.shelf.pick_any(&mut self.pool);
                            self.shelf.take(at)
                        }
                    };
                    let (event_type, listing_id) = match (what, existing) {
                        (ProKind::Reprice, Some(id)) => (EventType::PriceChanged, id),
                        (ProKind::Delist, Some(id)) => (EventType::Delisted, id),
                        _ => {
                            created.push(event_id + 1);
                            (EventType::ListingCreated, event_id + 1)
                        }
                    };
                    rows.push(Row {
                        event_id,
                        event_ts_ms: ts,
                        listing_id,
                        seller_id: seller,
                        event_type,
                        price_cents: r.between(PRO_PRICE.0, PRO_PRICE.1),
                    });
                }
                TxKind::ProSeller
            }
            Spec::Pallet { .. } | Spec::BigPallet => {
                let (items, gaps) = match spec {
                    Spec::Pallet { items } => (
                        items,
                        (1..items)
                            .map(|_| r.between(PALLET_GAP_MS.0, PALLET_GAP_MS.1))
                            .collect(),
                    ),
                    _ => {
                        let gaps = self
                            .big
                            .as_ref()
                            .map(|(_, g)| g.clone())
                            .unwrap_or_default();
                        (gaps.len() as i64 + 1, gaps)
                    }
                };
                let mut ts = start_ms;
                for i in 0..items {
                    if i > 0 {
                        ts += gaps.get(i as usize - 1).copied().unwrap_or(PALLET_GAP_MS.0);
                    }
                    let event_id = first_event + i;
                    created.push(event_id + 1);
                    rows.push(Row {
                        event_id,
                        event_ts_ms: ts,
                        listing_id: event_id + 1,
                        seller_id: WHOLESALE_SELLER,
                        event_type: EventType::ListingCreated,
                        price_cents: r.between(PALLET_PRICE.0, PALLET_PRICE.1),
                    });
                }
                TxKind::Wholesale
            }
        };
        self.next_event_id += rows.len() as i64;
        let last = rows.last().map_or(start_ms, |row| row.event_ts_ms);
        let commit_ms = last + COMMIT_MS;
        if !created.is_empty() {
            let stock = kind != TxKind::Shopper;
            self.shelf
                .pending
                .push(std::cmp::Reverse((commit_ms, tx_id, created, stock)));
        }
        Transaction {
            tx_id,
            kind,
            start_ms,
            commit_ms,
            rows,
            placed_by_hand: matches!(spec, Spec::BigPallet),
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

/// A pallet's size at hour `h` of the window, per mille of its starting size.
fn pallet_growth_pm(h: i64) -> i64 {
    1_000 + PALLET_GROWTH_PER_MILLE * h / SEASON_HOURS
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
            big_pallet: None,
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
                TxKind::ProSeller => assert!((8..=3_000).contains(&tx.rows.len())),
                TxKind::Wholesale => {
                    pallets += 1;
                    // Three days into the season: grown by at most 1,900 × 72 / 2,160 per mille.
                    assert!((1_500..=2_500 * 1_063 / 1_000).contains(&tx.rows.len()));
                }
            }
        }
        // Wednesday, Thursday, Friday: one pallet (Thursday).
        assert_eq!(pallets, 1);
    }

    #[test]
    fn listings_are_acted_on_only_once_they_are_in_the_shop() {
        use std::collections::HashMap;
        // listing → (committed at, gone)
        let mut shop: HashMap<i64, (i64, bool)> = HashMap::new();
        let mut txs: Vec<Transaction> = Generator::new(cfg(3)).collect();
        let mut sold = 0;
        // Check in commit order what each row refers to, at its own stamp.
        txs.sort_by_key(|t| t.start_ms);
        for tx in &txs {
            for r in &tx.rows {
                match r.event_type {
                    EventType::ListingCreated => {
                        assert!(shop.insert(r.listing_id, (tx.commit_ms, false)).is_none());
                    }
                    EventType::Returned => {}
                    t => {
                        let Some((committed, gone)) = shop.get_mut(&r.listing_id) else {
                            panic!("{t:?} of listing {} that was never created", r.listing_id)
                        };
                        assert!(
                            *committed <= tx.start_ms,
                            "acted on before it was in the shop"
                        );
                        assert!(!*gone, "{t:?} of a listing already gone");
                        if matches!(t, EventType::Sold | EventType::Delisted) {
                            *gone = true;
                            sold += 1;
                        }
                    }
                }
            }
        }
        assert!(sold > 1_000);
    }

    #[test]
    fn the_big_pallet_commits_when_asked_and_replaces_that_days_pallet() {
        let commit_ms = 1_780_444_800_000 + DAY_MS + 40 * 60_000; // Thursday 00:40
        let cfg = GeneratorConfig {
            big_pallet: Some(BigPallet {
                commit_ms,
                items: 12_000,
            }),
            ..cfg(3)
        };
        let pallets: Vec<Transaction> = Generator::new(cfg)
            .filter(|t| t.kind == TxKind::Wholesale)
            .collect();
        assert_eq!(pallets.len(), 1, "the big pallet replaces Thursday's");
        let p = &pallets[0];
        assert!(p.placed_by_hand);
        assert_eq!((p.rows.len(), p.commit_ms), (12_000, commit_ms));
        assert!((12_500_000..12_700_000).contains(&p.duration_ms()));
    }
}
