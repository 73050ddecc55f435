//! The simulation: Saltbox Market's order database, its payment processor, the Bank's rates and
//! the landing job, hour by hour.
//!
//! Every order's whole life is planned when it is created (from its own random stream), and
//! its future change events and payment events wait in a time-ordered queue. Each simulated
//! hour: create the hour's orders, commit everything due (assigning LSNs in commit order),
//! then write the hour's landing files from what the receivers got. Memory holds only what
//! is still in flight (at most a few weeks of pending refunds), never the season.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::calendar::*;
use crate::error::{IoContext, Result, SugarbushError};
use crate::events::{self, ChangeEvent, PaymentFacts, RowImage};
use crate::ids::{Kind, id};
use crate::landing::{self, relative_name, write_atomic, write_atomic_at};
use crate::progress::Progress;
use crate::rng::{Rng, mix64};
use crate::source::Source;
use crate::time::{self, DAY, HOUR, MINUTE, SECOND};
use crate::truth::{
    AwaitingTruth, DailyTruth, FaultCounts, FxRateTruth, FxSummary, MonthVolume, OrderChangeTruth,
    OrderTruth, PaymentEventTruth, Republished, ResentFile, SeasonWindow, SourceStats, TruthRow,
    TruthSummary, Volume, format_rate_micros,
};

// ---------------------------------------------------------------------------------------------
// The knobs. Probabilities are parts per million; durations milliseconds.

/// Real orders per day at scale 1.
const ORDERS_PER_DAY: u64 = 900;
/// Orders per Halifax-local hour of the day (relative weights).
const HOUR_WEIGHTS: [u64; 24] = [
    30, 20, 14, 10, 9, 11, 18, 28, 40, 52, 60, 66, 70, 68, 66, 64, 64, 68, 76, 84, 82, 72, 56, 42,
];
/// Per mille, Monday … Sunday (Halifax-local).
const WEEKDAY_PERMILLE: [u64; 7] = [960, 970, 990, 1000, 1020, 1040, 1020];

const P_TEST_ORDER: u64 = 3_000;
const P_US: u64 = 315_000;
const P_ABANDONED: u64 = 25_000;
const P_CANCEL_AFTER_PAY: u64 = 12_000;
const P_STUCK: u64 = 1_000;
const P_RETURN: u64 = 45_000;
const P_RETURN_FULL: u64 = 600_000;

/// About 2% of change events arrive hours to two days late.
const P_LATE_CDC: u64 = 20_000;
const LATE_CDC_MIN: i64 = 2 * HOUR;
const LATE_CDC_MAX: i64 = 48 * HOUR;
/// Skew of the late delay towards its minimum (delay = min + span × u^power).
const LATE_CDC_POWER: u32 = 3;
/// The CDC sink's ordinary lag: constant, so on-time events stay in commit order.
const CDC_LAG: i64 = SECOND;

/// About 1 in 40 payment events is delivered twice.
const P_DUPLICATE: u64 = 25_000;
/// Some webhooks come an hour to thirty hours late (the processor's retries).
const P_LATE_WEBHOOK: u64 = 6_000;
/// A crashing receiver cuts about 1 line in 8,000 short.
const P_TRUNCATED: u64 = 125;

const CUSTOMERS_CA: u64 = 52_000;
const CUSTOMERS_US: u64 = 24_000;
const US_CUSTOMER_BASE: u64 = 1 << 40;
const QA_CUSTOMER_BASE: u64 = 1 << 41;

/// The landing job re-sends exactly this many files.
const RESENT_FILES: usize = 7;

/// Largest `--scale`.
pub const MAX_SCALE: u32 = 10_000;

struct Region {
    code: &'static str,
    weight: u32,
    /// Sales tax in parts per million.
    tax_ppm: i64,
}

const fn r(code: &'static str, weight: u32, tax_ppm: i64) -> Region {
    Region {
        code,
        weight,
        tax_ppm,
    }
}

const REGIONS_CA: [Region; 10] = [
    r("CA-ON", 38, 130_000),
    r("CA-QC", 20, 149_750),
    r("CA-BC", 14, 120_000),
    r("CA-AB", 11, 50_000),
    r("CA-NS", 6, 140_000),
    r("CA-MB", 3, 120_000),
    r("CA-SK", 3, 110_000),
    r("CA-NB", 2, 150_000),
    r("CA-NL", 2, 150_000),
    r("CA-PE", 1, 150_000),
];

const REGIONS_US: [Region; 15] = [
    r("US-CA", 16, 72_500),
    r("US-NY", 14, 88_750),
    r("US-MA", 8, 62_500),
    r("US-TX", 9, 62_500),
    r("US-WA", 7, 65_000),
    r("US-IL", 6, 62_500),
    r("US-PA", 6, 60_000),
    r("US-NJ", 5, 66_250),
    r("US-OR", 5, 0),
    r("US-CO", 5, 29_000),
    r("US-MN", 4, 68_750),
    r("US-VT", 4, 60_000),
    r("US-ME", 4, 55_000),
    r("US-FL", 4, 60_000),
    r("US-NH", 3, 0),
];

/// Item prices in whole dollars, and how often each sells.
const PRICES: [i64; 13] = [16, 22, 28, 34, 42, 52, 64, 78, 96, 125, 165, 220, 295];
const PRICE_WEIGHTS: [u32; 13] = [10, 14, 14, 12, 11, 9, 8, 6, 5, 4, 3, 2, 1];
const ITEM_COUNT_WEIGHTS: [u32; 4] = [52, 28, 13, 7];

// Stream tags: one independent random stream per purpose.
const TAG_HOUR: u64 = 1;
const TAG_ORDER: u64 = 2;
const TAG_LSN: u64 = 3;
const TAG_RESEND: u64 = 4;
const TAG_FX: u64 = 5;
const TAG_SETTLE: u64 = 6;
const TAG_LAND: u64 = 7;

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Created,
    Paid,
    Shipped,
    Cancelled,
}

impl Status {
    const fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Paid => "paid",
            Status::Shipped => "shipped",
            Status::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    const fn as_str(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
        }
    }
}

/// What every row image of an order shares.
#[derive(Debug, Clone, Copy)]
struct Core {
    no: u64,
    customer: u64,
    test: bool,
    usd: bool,
    region: &'static str,
    total: i64,
    created: i64,
}

/// An order's whole life, carried by its last change event into `truth/orders.csv`.
#[derive(Debug, Clone, Copy, Default)]
struct Life {
    paid: Option<i64>,
    shipped: Option<i64>,
    cancelled: Option<i64>,
    deleted: Option<i64>,
    refund: Option<(i64, i64)>,
    changes: u32,
}

#[derive(Debug)]
struct ChangeItem {
    core: Core,
    op: Op,
    status: Status,
    /// The previous row image's status and updated_at (None for a create).
    prev: Option<(Status, i64)>,
    commit: i64,
    receipt: i64,
    late: bool,
    overtaken: bool,
    last: Option<Box<Life>>,
}

#[derive(Debug, Clone, Copy)]
struct Attempt {
    receipt: i64,
    /// Per mille of the line kept by a crashing receiver; 0 = a complete delivery.
    truncated_permille: u16,
}

#[derive(Debug)]
struct PaymentItem {
    order_no: u64,
    usd: bool,
    refund: bool,
    created_s: i64,
    charge_amount: i64,
    refund_amount: i64,
    attempts: Vec<Attempt>,
}

#[derive(Debug)]
enum Item {
    Change(Box<ChangeItem>),
    Payment(Box<PaymentItem>),
}

/// A min-heap entry ordered by (time, insertion sequence): the same order on every run.
#[derive(Debug)]
struct Timed<T> {
    at: i64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Timed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug)]
struct Queue<T> {
    heap: BinaryHeap<Timed<T>>,
    seq: u64,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> Queue<T> {
    fn push(&mut self, at: i64, item: T) {
        self.seq += 1;
        self.heap.push(Timed {
            at,
            seq: self.seq,
            item,
        });
    }

    fn pop_before(&mut self, until: i64) -> Option<(i64, T)> {
        if self.heap.peek().is_some_and(|t| t.at < until) {
            self.heap.pop().map(|t| (t.at, t.item))
        } else {
            None
        }
    }

    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct DayTotals {
    captured: i64,
    refunded: i64,
    captures: u64,
    refunds: u64,
    /// Net in CAD cents, each event converted and rounded on its own.
    net_cad_by_event: i64,
}

/// What `generate` counts while it writes.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    pub faults: FaultCounts,
    pub sources: [SourceStats; 4],
    pub volume: Volume,
    pub resent: Vec<ResentFile>,
    pub fx: FxSummary,
}

/// Halifax-local hour of day and weekday (0 = Monday) of a UTC hour start.
fn halifax(ms: i64) -> (usize, usize) {
    let local = ms + HALIFAX_OFFSET;
    let hour = (local.rem_euclid(DAY) / HOUR) as usize;
    let wd = time::weekday(time::day_of(local)) as usize;
    (hour, wd)
}

/// Index of the simulated hour holding an instant.
const fn hour_index(ms: i64) -> i64 {
    (ms - ORDERS_FROM).div_euclid(HOUR)
}

/// When the hourly file of `source` for hour `h` lands: a few seconds after the hour closes.
fn hourly_landing(seed: u64, source: Source, h: i64) -> i64 {
    let jitter = 2
        + (mix64(seed ^ mix64(TAG_LAND ^ ((h as u64) << 3) ^ (source.index() as u64))) % 49) as i64;
    ORDERS_FROM + (h + 1) * HOUR + jitter * SECOND
}

/// Rounds `a * b / d` half away from zero (all integers, any signs of `a`).
fn mul_div_round(a: i64, b: i64, d: i64) -> i64 {
    let p = i128::from(a) * i128::from(b);
    let d = i128::from(d);
    let q = if p >= 0 {
        (p + d / 2) / d
    } else {
        (p - d / 2) / d
    };
    q as i64
}

struct TruthFiles {
    dir: PathBuf,
    orders: BufWriter<fs::File>,
    changes: BufWriter<fs::File>,
    payments: BufWriter<fs::File>,
}

impl TruthFiles {
    fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).at(dir)?;
        let open = |file: &str, header: &str| -> Result<BufWriter<fs::File>> {
            let tmp = landing::temp_sibling(&dir.join(file))?;
            let f = fs::File::create(&tmp).at(&tmp)?;
            let mut w = BufWriter::with_capacity(1 << 16, f);
            writeln!(w, "{header}").at(&tmp)?;
            Ok(w)
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            orders: open(OrderTruth::FILE, OrderTruth::HEADER)?,
            changes: open(OrderChangeTruth::FILE, OrderChangeTruth::HEADER)?,
            payments: open(PaymentEventTruth::FILE, PaymentEventTruth::HEADER)?,
        })
    }

    fn finish(self) -> Result<()> {
        for (w, file) in [
            (self.orders, OrderTruth::FILE),
            (self.changes, OrderChangeTruth::FILE),
            (self.payments, PaymentEventTruth::FILE),
        ] {
            let path = self.dir.join(file);
            let tmp = landing::temp_sibling(&path)?;
            let f = w.into_inner().map_err(|e| SugarbushError::Io {
                path: tmp.clone(),
                source: e.into_error(),
            })?;
            f.sync_all().at(&tmp)?;
            fs::rename(&tmp, &path).at(&path)?;
        }
        Ok(())
    }
}

/// One month's bridge and two-answers figures, per as-of (`truth/bridge.csv`,
/// `truth/two_answers.csv`).
#[derive(Debug, Clone, Copy, Default)]
struct Weighed {
    naive: i64,
    resent: i64,
    retries: i64,
    v2_null: i64,
    refunds: i64,
    usd: i64,
    /// The month's cash by processor date (CAD, event by event): the bridge's end.
    cash: i64,
    /// The month's orders by order date (CAD at the order date's rate).
    orders: i64,
}

/// A month's as-ofs (ms) and its figures at each.
#[derive(Debug, Clone, Default)]
struct MonthWeighed {
    as_ofs: Vec<i64>,
    at: Vec<Weighed>,
}

/// One payment event as the bridge and the two answers see it.
struct Weigh<'a> {
    usd: bool,
    refund: bool,
    /// Created, ms (whole seconds).
    at: i64,
    amount: i64,
    attempts: &'a [Attempt],
    /// The Halifax day the order was created (days since the epoch).
    order_day: i64,
    /// When the first of the order's changes landed: from then a pipeline knows the order.
    order_known: i64,
}

/// One resend: the file of (source, hour) is sent again, landing at `copy_at`.
#[derive(Debug, Clone, Copy)]
struct ResendSlot {
    copy_at: i64,
}

pub(crate) struct Season {
    seed: u64,
    scale: u32,
    landing: PathBuf,
    commits: Queue<Item>,
    arrivals: [Queue<Vec<u8>>; 2],
    lsn: u64,
    lsn_rng: Rng,
    next_order: u64,
    resend: BTreeMap<(usize, i64), ResendSlot>,
    days: BTreeMap<i64, [DayTotals; 2]>,
    months: BTreeMap<i64, MonthVolume>,
    awaiting: Vec<[u64; 6]>,
    /// Orders whose naive view stays "paid" for good: added from a checkpoint onward.
    awaiting_tail: Vec<[u64; 6]>,
    fx_rows: Vec<FxRateTruth>,
    weighed: BTreeMap<(i32, u32), MonthWeighed>,
    tally: Tally,
    truth: TruthFiles,
    line: Vec<u8>,
}

impl Season {
    pub(crate) fn new(root: &Path, seed: u64, scale: u32) -> Result<Self> {
        let truth = TruthFiles::create(&landing::truth_dir(root))?;
        let tally = Tally {
            faults: FaultCounts::default(),
            sources: Source::ALL.map(|source| SourceStats {
                source,
                files: 0,
                lines: 0,
                bytes: 0,
            }),
            volume: Volume::default(),
            resent: Vec::new(),
            fx: FxSummary::default(),
        };
        let mut season = Self {
            seed,
            scale,
            landing: landing::landing_dir(root),
            commits: Queue::default(),
            arrivals: [Queue::default(), Queue::default()],
            lsn: 0,
            lsn_rng: Rng::stream(seed, TAG_LSN, 0),
            next_order: 1,
            resend: BTreeMap::new(),
            days: BTreeMap::new(),
            months: BTreeMap::new(),
            awaiting: vec![[0; 6]; CHECKPOINTS],
            awaiting_tail: vec![[0; 6]; CHECKPOINTS + 1],
            fx_rows: Vec::new(),
            weighed: BTreeMap::new(),
            tally,
            truth,
            line: Vec::with_capacity(1024),
        };
        season.lsn = 0x16_B3A0_0000 + season.lsn_rng.below(1 << 24);
        season.plan_resends();
        Ok(season)
    }

    /// Seven (source, hour) files to send twice, one in each seventh of the order window
    /// (so they are spread over the season), at a daytime hour, where a file always exists;
    /// the copy lands 2 to 30 hours later, at minute 10 to 49 (never at the same instant as an
    /// hourly file).
    fn plan_resends(&mut self) {
        let mut rng = Rng::stream(self.seed, TAG_RESEND, 0);
        let days = (ORDERS_UNTIL - ORDERS_FROM) / DAY;
        let n = RESENT_FILES as i64;
        for i in 0..n {
            let source = if rng.below(10) < 7 {
                Source::Payments
            } else {
                Source::Orders
            };
            let day = rng.range(i * days / n, (i + 1) * days / n - 1);
            let local_hour = 9 + rng.below(12) as i64;
            let h = day * 24 + local_hour + 3;
            let copy_at = ORDERS_FROM
                + (h + 1) * HOUR
                + rng.range(2, 30) * HOUR
                + rng.range(10, 49) * MINUTE
                + rng.range(0, 59) * SECOND;
            self.resend
                .insert((source.index(), h), ResendSlot { copy_at });
        }
    }

    pub(crate) fn run(mut self, progress: &dyn Progress) -> Result<Tally> {
        progress.set_total(SEASON_HOURS as u64);
        self.write_fx()?;
        let started = std::time::Instant::now();
        for h in 0..SEASON_HOURS {
            let start = ORDERS_FROM + h * HOUR;
            let end = start + HOUR;
            if start < ORDERS_UNTIL {
                self.spawn_orders(h, start)?;
            }
            while let Some((_, item)) = self.commits.pop_before(end) {
                match item {
                    Item::Change(c) => self.commit_change(*c)?,
                    Item::Payment(p) => self.commit_payment(*p)?,
                }
            }
            for source in [Source::Orders, Source::Payments] {
                self.write_hour(source, h, start, end)?;
            }
            progress.inc(1);
            if (h + 1) % 24 == 0 {
                let lines: u64 = self.tally.sources.iter().map(|s| s.lines).sum();
                let secs = started.elapsed().as_secs_f64();
                let rate = if secs > 0.0 {
                    (lines as f64 / secs) as u64
                } else {
                    0
                };
                progress.message(&format!(
                    "{} · {} lines · {} lines/s",
                    time::date_string(time::day_of(start)),
                    thousands(lines),
                    thousands(rate)
                ));
            }
        }
        if self.commits.len() > 0 || self.arrivals.iter().any(|q| q.len() > 0) {
            return Err(SugarbushError::Internal(format!(
                "{} commits and {} deliveries were scheduled after the season's end",
                self.commits.len(),
                self.arrivals.iter().map(Queue::len).sum::<usize>()
            )));
        }
        self.write_settlements()?;
        self.finish()
    }

    // -- orders --------------------------------------------------------------------------------

    fn spawn_orders(&mut self, h: i64, start: i64) -> Result<()> {
        let mut rng = Rng::stream(self.seed, TAG_HOUR, h as u64);
        let (local_hour, wd) = halifax(start);
        let weight_sum: u64 = HOUR_WEIGHTS.iter().sum();
        let num = 2
            * ORDERS_PER_DAY
            * u64::from(self.scale)
            * HOUR_WEIGHTS[local_hour]
            * WEEKDAY_PERMILLE[wd];
        let den = weight_sum * 1000;
        let flips = (num + den / 2) / den;
        let n = rng.coin_flips(flips);
        let mut times: Vec<i64> = (0..n)
            .map(|_| start + rng.below(HOUR as u64) as i64)
            .collect();
        times.sort_unstable();
        for created in times {
            // The last minutes of the order window: leave room for the charge.
            let created = created.min(ORDERS_UNTIL - 20 * MINUTE);
            let no = self.next_order;
            self.next_order += 1;
            self.plan_order(no, created)?;
        }
        Ok(())
    }

    /// Plans one order's whole life and queues its changes and payment events.
    fn plan_order(&mut self, no: u64, created: i64) -> Result<()> {
        let mut rng = Rng::stream(self.seed, TAG_ORDER, no);
        let test = rng.chance_ppm(P_TEST_ORDER);
        let usd = !test && rng.chance_ppm(P_US);
        let regions: &[Region] = if usd { &REGIONS_US } else { &REGIONS_CA };
        let region = if test {
            &REGIONS_CA[4]
        } else {
            &regions[rng.weighted(&regions.iter().map(|r| r.weight).collect::<Vec<_>>())]
        };
        let customer = if test {
            QA_CUSTOMER_BASE + rng.below(3)
        } else if usd {
            US_CUSTOMER_BASE + rng.below(CUSTOMERS_US * u64::from(self.scale))
        } else {
            rng.below(CUSTOMERS_CA * u64::from(self.scale))
        };
        let total = if test {
            rng.range(100, 2_500)
        } else {
            order_total(&mut rng, usd, region.tax_ppm)
        };
        let core = Core {
            no,
            customer,
            test,
            usd,
            region: region.code,
            total,
            created,
        };

        // The status changes, in commit order.
        let mut changes: Vec<(i64, Op, Status)> = vec![(created, Op::Create, Status::Created)];
        let mut payments: Vec<(bool, i64, i64)> = Vec::new(); // (refund, created_ms, amount)
        let mut life = Life::default();
        if test {
            let deleted = created + rng.range(2 * MINUTE, 3 * HOUR);
            changes.push((deleted, Op::Delete, Status::Created));
            life.deleted = Some(deleted);
        } else if rng.chance_ppm(P_ABANDONED) {
            let at = created + rng.range(20 * MINUTE, 20 * HOUR);
            changes.push((at, Op::Update, Status::Cancelled));
            life.cancelled = Some(at);
        } else {
            let pay_delay = rng.range(5 * SECOND, 15 * MINUTE);
            let charge_ms = ((created + pay_delay).min(ORDERS_UNTIL - SECOND)) / SECOND * SECOND;
            let paid = charge_ms + rng.range(400, 8 * SECOND);
            payments.push((false, charge_ms, total));
            changes.push((paid, Op::Update, Status::Paid));
            life.paid = Some(paid);
            if rng.chance_ppm(P_CANCEL_AFTER_PAY) {
                let at = paid + rng.range(HOUR, 36 * HOUR);
                let refund_ms = (at - rng.range(2 * SECOND, 90 * SECOND)) / SECOND * SECOND;
                payments.push((true, refund_ms, total));
                changes.push((at, Op::Update, Status::Cancelled));
                life.cancelled = Some(at);
                life.refund = Some((refund_ms, total));
            } else {
                let shipped = if rng.chance_ppm(P_STUCK) {
                    paid + rng.range(80 * HOUR, 288 * HOUR)
                } else {
                    paid + rng.hump(16 * HOUR, 71 * HOUR)
                };
                changes.push((shipped, Op::Update, Status::Shipped));
                life.shipped = Some(shipped);
                let returns = rng.chance_ppm(P_RETURN);
                let full = rng.chance_ppm(P_RETURN_FULL);
                let share = rng.range(20, 90);
                let first = shipped + 3 * DAY;
                let last = (shipped + 30 * DAY).min(REFUNDS_UNTIL - SECOND);
                let when = rng.range(first, last);
                if returns && first < last {
                    let refund_ms = when / SECOND * SECOND;
                    let amount = if full {
                        total
                    } else {
                        (total * share / 100).clamp(1, total)
                    };
                    payments.push((true, refund_ms, amount));
                    life.refund = Some((refund_ms, amount));
                }
            }
        }
        life.changes = changes.len() as u32;

        // When each change reaches the landing zone.
        let mut receipts = Vec::with_capacity(changes.len());
        let mut lates = Vec::with_capacity(changes.len());
        for &(commit, _, _) in &changes {
            let late = rng.chance_ppm(P_LATE_CDC);
            let lag = if late {
                rng.skewed(LATE_CDC_MIN, LATE_CDC_MAX, LATE_CDC_POWER)
            } else {
                CDC_LAG
            };
            receipts.push(commit + lag);
            lates.push(late);
        }
        if !test {
            self.count_awaiting(&core, &changes, &receipts);
        }

        let n = changes.len();
        let mut prev: Option<(Status, i64)> = None;
        for (i, &(commit, op, status)) in changes.iter().enumerate() {
            let overtaken = lates[i] && (i + 1..n).any(|j| receipts[j] < receipts[i]);
            let item = ChangeItem {
                core,
                op,
                status,
                prev,
                commit,
                receipt: receipts[i],
                late: lates[i],
                overtaken,
                last: (i + 1 == n).then(|| Box::new(life)),
            };
            self.commits.push(commit, Item::Change(Box::new(item)));
            prev = Some((status, commit));
        }

        let charge_amount = total;
        let order_known = receipts
            .iter()
            .map(|&r| hourly_landing(self.seed, Source::Orders, hour_index(r)))
            .min()
            .unwrap_or(i64::MAX);
        for (refund, at, amount) in payments {
            let attempts = plan_deliveries(&mut rng, at);
            self.weigh(&Weigh {
                usd,
                refund,
                at,
                amount,
                attempts: &attempts,
                order_day: time::day_of(created + HALIFAX_OFFSET),
                order_known,
            })?;
            let item = PaymentItem {
                order_no: no,
                usd,
                refund,
                created_s: at / SECOND,
                charge_amount,
                refund_amount: amount,
                attempts,
            };
            self.commits.push(at, Item::Payment(Box::new(item)));
        }
        Ok(())
    }

    /// Adds one payment event to the bridge of its UTC month and to the two answers of its
    /// order's month, at every as-of of each: the bucket brigade counts every complete delivery
    /// in every landed file (re-sent copies too) of an API 2025-11-01 charge; a correct pipeline
    /// counts the event once from its first complete delivery's landing, and by order date only
    /// once the order is known.
    fn weigh(&mut self, e: &Weigh) -> Result<()> {
        let v2 = e.usd && e.at >= API_CHANGE;
        let signed = if e.refund { -e.amount } else { e.amount };
        let (cash_rate, order_rate) = if e.usd {
            (
                Some(self.rate_micros_for(time::day_of(e.at))?),
                self.rate_micros_for(e.order_day).ok(),
            )
        } else {
            (Some(1_000_000), Some(1_000_000))
        };
        let cad = cash_rate.map_or(0, |r| mul_div_round(signed, r, 1_000_000));
        let naive_amount = if e.refund || v2 { 0 } else { e.amount };
        let mut landed = Vec::with_capacity(e.attempts.len());
        let mut copies = Vec::new();
        for a in e.attempts.iter().filter(|a| a.truncated_permille == 0) {
            let h = hour_index(a.receipt);
            landed.push(hourly_landing(self.seed, Source::Payments, h));
            if let Some(slot) = self.resend.get(&(Source::Payments.index(), h)) {
                copies.push(slot.copy_at);
            }
        }
        let first = landed.iter().min().copied().unwrap_or(i64::MAX);

        let cash = self.weighed_month(e.at);
        for (t, w) in cash.as_ofs.iter().zip(cash.at.iter_mut()) {
            let n = landed.iter().filter(|l| **l <= *t).count() as i64;
            if n == 0 {
                continue;
            }
            let c = copies.iter().filter(|c| **c <= *t).count() as i64;
            w.naive += (n + c) * naive_amount;
            w.resent += c * naive_amount;
            w.retries += (n - 1) * naive_amount;
            if v2 && !e.refund {
                w.v2_null += e.amount;
            }
            if e.refund {
                w.refunds += e.amount;
            }
            if e.usd {
                w.usd += cad - signed;
            }
            w.cash += cad;
        }
        if let Some(rate) = order_rate {
            let order_cad = mul_div_round(signed, rate, 1_000_000);
            let known = first.max(e.order_known);
            let orders = self.weighed_month(e.order_day * DAY);
            for (t, w) in orders.as_ofs.iter().zip(orders.at.iter_mut()) {
                if known <= *t {
                    w.orders += order_cad;
                }
            }
        }
        Ok(())
    }

    /// The figures of the month holding `ms` (UTC).
    fn weighed_month(&mut self, ms: i64) -> &mut MonthWeighed {
        use chrono::Datelike;
        let t = time::to_datetime(ms);
        let (y, m) = (t.year(), t.month());
        self.weighed.entry((y, m)).or_insert_with(|| {
            let as_ofs: Vec<i64> = crate::truth::as_ofs_for_month(y, m)
                .iter()
                .map(time::from_datetime)
                .collect();
            MonthWeighed {
                at: vec![Weighed::default(); as_ofs.len()],
                as_ofs,
            }
        })
    }

    /// Adds this order's contribution to the awaiting-shipment checkpoints: true (by commit),
    /// visible (highest LSN landed) and naive (last received, re-sent files read again).
    fn count_awaiting(&mut self, core: &Core, changes: &[(i64, Op, Status)], receipts: &[i64]) {
        let Some(paid_idx) = changes.iter().position(|c| c.2 == Status::Paid) else {
            return;
        };
        let paid_at = changes[paid_idx].0;
        let end_at = changes.get(paid_idx + 1).map_or(i64::MAX, |c| c.0);
        let landed: Vec<i64> = receipts
            .iter()
            .map(|&r| hourly_landing(self.seed, Source::Orders, hour_index(r)))
            .collect();
        // Every (landing instant, receipt, change index) at which the bucket brigade reads a change.
        let mut reads: Vec<(i64, i64, usize)> = Vec::with_capacity(receipts.len() * 2);
        for (i, &r) in receipts.iter().enumerate() {
            reads.push((landed[i], r, i));
            if let Some(slot) = self.resend.get(&(Source::Orders.index(), hour_index(r))) {
                reads.push((slot.copy_at, r, i));
            }
        }
        reads.sort_unstable();
        let horizon = reads
            .iter()
            .map(|x| x.0)
            .max()
            .unwrap_or(core.created)
            .max(end_at.min(ARRIVALS_UNTIL));
        let first_k = (paid_at - checkpoint_ms(0)).div_euclid(DAY).max(0) as usize;
        let mut k = first_k;
        while k < CHECKPOINTS {
            let t = checkpoint_ms(k);
            if t > horizon {
                break;
            }
            let over = paid_at < t - 72 * HOUR;
            let slot = &mut self.awaiting[k];
            if paid_at <= t && t < end_at {
                slot[0] += 1;
                slot[1] += u64::from(over);
            }
            let visible = (0..changes.len()).rev().find(|&i| landed[i] <= t);
            if visible == Some(paid_idx) {
                slot[2] += 1;
                slot[3] += u64::from(over);
            }
            let naive = reads.iter().rev().find(|x| x.0 <= t).map(|x| x.2);
            if naive == Some(paid_idx) {
                slot[4] += 1;
                slot[5] += u64::from(over);
            }
            k += 1;
        }
        // Past the horizon nothing changes any more: the true and visible views have moved on
        // from "paid"; the naive one may say "paid" for good (a late "paid" read last).
        if k < CHECKPOINTS && reads.last().map(|x| x.2) == Some(paid_idx) {
            self.awaiting_tail[k][4] += 1;
            let over_from = (k..CHECKPOINTS)
                .find(|&j| paid_at < checkpoint_ms(j) - 72 * HOUR)
                .unwrap_or(CHECKPOINTS);
            self.awaiting_tail[over_from][5] += 1;
        }
    }

    fn row<'b>(
        &self,
        core: &Core,
        ids: &'b (String, String, String, String),
        status: Status,
    ) -> RowImage<'b> {
        RowImage {
            order_id: &ids.0,
            customer_id: &ids.1,
            status: status.as_str(),
            currency: if core.usd { "usd" } else { "cad" },
            total_minor: core.total,
            ship_region: core.region,
            created_at: &ids.2,
            updated_at: &ids.3,
        }
    }

    fn commit_change(&mut self, c: ChangeItem) -> Result<()> {
        let lsn = self.lsn;
        self.lsn += self.lsn_rng.range(40, 900) as u64;
        let order_id = id(Kind::Order, self.seed, c.core.no);
        let customer_id = id(Kind::Customer, self.seed, c.core.customer);
        let created_at = time::rfc3339_ms(c.core.created);
        let after_ids = (
            order_id.clone(),
            customer_id.clone(),
            created_at.clone(),
            time::rfc3339_ms(c.commit),
        );
        let before_ids = c.prev.map(|(_, updated)| {
            (
                order_id.clone(),
                customer_id.clone(),
                created_at.clone(),
                time::rfc3339_ms(updated),
            )
        });
        let before = match (&before_ids, c.prev) {
            (Some(ids), Some((status, _))) => Some(self.row(&c.core, ids, status)),
            _ => None,
        };
        let after = (c.op != Op::Delete).then(|| self.row(&c.core, &after_ids, c.status));
        let event = ChangeEvent {
            op: c.op.as_str(),
            lsn,
            before,
            after,
            ts_ms: c.commit,
        };
        let mut line = Vec::with_capacity(512);
        serde_json::to_writer(&mut line, &event)
            .map_err(|e| SugarbushError::Internal(format!("serialising a change event: {e}")))?;
        line.push(b'\n');
        self.arrivals[0].push(c.receipt, line);

        let landed = hourly_landing(self.seed, Source::Orders, hour_index(c.receipt));
        let status = if c.op == Op::Delete {
            c.prev.map_or(c.status, |p| p.0)
        } else {
            c.status
        };
        let f = &mut self.tally.faults;
        f.late_cdc_events += u64::from(c.late);
        f.late_cdc_overtaken += u64::from(c.overtaken);
        if c.core.test {
            f.test_orders_created += u64::from(c.op == Op::Create);
            f.test_orders_deleted += u64::from(c.op == Op::Delete);
        }
        self.tally.volume.change_events += 1;
        let path = self.truth.dir.join(OrderChangeTruth::FILE);
        writeln!(
            self.truth.changes,
            "{lsn},{order_id},{},{},{},{},{},{},{}",
            c.op.as_str(),
            status.as_str(),
            after_ids.3,
            time::rfc3339_ms(c.receipt),
            time::rfc3339_ms(landed),
            u8::from(c.late),
            u8::from(c.overtaken)
        )
        .at(&path)?;

        if let Some(life) = c.last {
            self.finish_order(
                &c.core,
                &life,
                status,
                lsn,
                &order_id,
                &customer_id,
                &created_at,
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_order(
        &mut self,
        core: &Core,
        life: &Life,
        status: Status,
        lsn: u64,
        order_id: &str,
        customer_id: &str,
        created_at: &str,
    ) -> Result<()> {
        let t = |x: Option<i64>| x.map(time::rfc3339_ms).unwrap_or_default();
        let charge = if life.paid.is_some() {
            id(Kind::Charge, self.seed, core.no)
        } else {
            String::new()
        };
        let refund_id = if life.refund.is_some() {
            id(Kind::Refund, self.seed, core.no)
        } else {
            String::new()
        };
        let path = self.truth.dir.join(OrderTruth::FILE);
        writeln!(
            self.truth.orders,
            "{order_id},{customer_id},{},{},{},{},{charge},{created_at},{},{},{},{},{refund_id},{},{},{},{lsn},{}",
            u8::from(core.test),
            if core.usd { "usd" } else { "cad" },
            core.region,
            core.total,
            t(life.paid),
            t(life.shipped),
            t(life.cancelled),
            t(life.deleted),
            life.refund.map_or(0, |r| r.1),
            t(life.refund.map(|r| r.0)),
            status.as_str(),
            life.changes
        )
        .at(&path)?;

        if !core.test {
            let v = &mut self.tally.volume;
            v.orders += 1;
            v.orders_paid += u64::from(life.paid.is_some());
            v.orders_shipped += u64::from(life.shipped.is_some());
            v.orders_cancelled += u64::from(life.cancelled.is_some());
            if let (Some(p), Some(s)) = (life.paid, life.shipped) {
                v.orders_stuck_over_72h += u64::from(s - p > 72 * HOUR);
            }
            self.month(core.created).orders_created += 1;
        }
        Ok(())
    }

    fn month(&mut self, ms: i64) -> &mut MonthVolume {
        let (y, m, _) = time::civil_from_days(time::day_of(ms));
        self.months
            .entry(y * 100 + m)
            .or_insert_with(|| MonthVolume {
                month: format!("{y:04}-{m:02}"),
                ..MonthVolume::default()
            })
    }

    fn commit_payment(&mut self, p: PaymentItem) -> Result<()> {
        let created_ms = p.created_s * SECOND;
        let v2 = p.usd && created_ms >= API_CHANGE;
        let event_no = p.order_no * 2 + u64::from(p.refund);
        let event_id = id(Kind::Event, self.seed, event_no);
        let order_id = id(Kind::Order, self.seed, p.order_no);
        let charge_id = id(Kind::Charge, self.seed, p.order_no);
        let refund_id = if p.refund {
            id(Kind::Refund, self.seed, p.order_no)
        } else {
            String::new()
        };
        let currency = if p.usd { "usd" } else { "cad" };
        let facts = PaymentFacts {
            event_id: &event_id,
            refund: p.refund,
            v2,
            created_s: p.created_s,
            order_id: &order_id,
            charge_id: &charge_id,
            charge_amount: p.charge_amount,
            refund_id: &refund_id,
            refund_amount: p.refund_amount,
            currency,
        };
        self.line.clear();
        events::write_payment(&mut self.line, &facts)
            .map_err(|e| SugarbushError::Internal(format!("serialising a payment event: {e}")))?;

        let mut complete = 0u32;
        let mut truncated = 0u32;
        let mut first_landed = None;
        for a in &p.attempts {
            let mut bytes = if a.truncated_permille == 0 {
                complete += 1;
                if first_landed.is_none() {
                    first_landed = Some(hourly_landing(
                        self.seed,
                        Source::Payments,
                        hour_index(a.receipt),
                    ));
                }
                self.line.clone()
            } else {
                truncated += 1;
                let keep = self.line.len() * usize::from(a.truncated_permille) / 1000;
                self.line[..keep.clamp(1, self.line.len() - 1)].to_vec()
            };
            bytes.push(b'\n');
            self.arrivals[1].push(a.receipt, bytes);
        }
        let first_landed = first_landed.ok_or_else(|| {
            SugarbushError::Internal(format!("event {event_id} has no complete delivery"))
        })?;

        let amount = if p.refund {
            p.refund_amount
        } else {
            p.charge_amount
        };
        let f = &mut self.tally.faults;
        f.duplicate_deliveries += u64::from(complete - 1);
        f.events_delivered_twice += u64::from(complete > 1);
        f.truncated_lines += u64::from(truncated);
        let first_receipt = p
            .attempts
            .iter()
            .find(|a| a.truncated_permille == 0)
            .map_or(created_ms, |a| a.receipt);
        f.late_webhooks += u64::from(first_receipt - created_ms >= HOUR);
        if v2 {
            f.v2_events += 1;
            f.v2_deliveries += u64::from(complete);
        }
        self.tally.volume.payment_events += 1;

        let day = time::day_of(created_ms);
        let rate = if p.usd {
            self.rate_micros_for(day)?
        } else {
            1_000_000
        };
        let signed = if p.refund { -amount } else { amount };
        let totals = &mut self.days.entry(day).or_default()[usize::from(p.usd)];
        totals.net_cad_by_event += mul_div_round(signed, rate, 1_000_000);
        if p.refund {
            totals.refunded += amount;
            totals.refunds += 1;
        } else {
            totals.captured += amount;
            totals.captures += 1;
        }
        let month = self.month(created_ms);
        if p.refund {
            month.refunds += 1;
        } else {
            month.captures += 1;
        }

        let path = self.truth.dir.join(PaymentEventTruth::FILE);
        writeln!(
            self.truth.payments,
            "{event_id},{},{},{},{currency},{amount},{order_id},{charge_id},{refund_id},{complete},{truncated},{}",
            if p.refund { "refund" } else { "capture" },
            if v2 { events::API_V2 } else { events::API_V1 },
            time::rfc3339_ms(created_ms),
            time::rfc3339_ms(first_landed)
        )
        .at(&path)?;
        Ok(())
    }

    /// The valid USD→CAD rate for a UTC day: the latest rate date on or before it.
    fn rate_micros_for(&self, day: i64) -> Result<i64> {
        let date = naive_date(day)?;
        let i = self.fx_rows.partition_point(|r| r.rate_date <= date);
        i.checked_sub(1)
            .map(|i| self.fx_rows[i].rate_micros)
            .ok_or_else(|| SugarbushError::Internal(format!("no rate on or before {date}")))
    }

    // -- landing files -------------------------------------------------------------------------

    fn write_hour(&mut self, source: Source, h: i64, start: i64, end: i64) -> Result<()> {
        let q = usize::from(source == Source::Payments);
        let mut buf = Vec::new();
        let mut lines = 0u64;
        while let Some((_, bytes)) = self.arrivals[q].pop_before(end) {
            buf.extend_from_slice(&bytes);
            lines += 1;
        }
        if lines == 0 {
            return Ok(());
        }
        let landed_at = hourly_landing(self.seed, source, h);
        if landed_at >= ARRIVALS_UNTIL {
            return Err(SugarbushError::Internal(format!(
                "the {source} file of hour {h} would land after the season"
            )));
        }
        let label = time::compact_hour(start);
        let rel = self.put(source, landed_at, &label, &buf, lines)?;
        if let Some(slot) = self.resend.get(&(source.index(), h)).copied() {
            let copy = self.put(source, slot.copy_at, &label, &buf, lines)?;
            self.tally.faults.resent_files += 1;
            self.tally.resent.push(ResentFile {
                source,
                original: rel,
                copy,
                sha256: hex::encode(Sha256::digest(&buf)),
            });
        }
        Ok(())
    }

    /// Land one file at `landed_ms` under its landing name (returned). Its modification time is
    /// that instant, as if it had been written then: a landing zone generated in a second reads
    /// like one filled over the season, and a tap's check for files rewritten after it hashed
    /// them (a file modified within a minute of the tap that recorded it is hashed again) is
    /// not set off by every file of a freshly generated season.
    fn put(
        &mut self,
        source: Source,
        landed_ms: i64,
        label: &str,
        bytes: &[u8],
        lines: u64,
    ) -> Result<String> {
        let rel = relative_name(source, landed_ms, label);
        let path = self.landing.join(&rel);
        let landed = u64::try_from(landed_ms)
            .ok()
            .and_then(|ms| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms)))
            .ok_or_else(|| {
                SugarbushError::Internal(format!("{rel} would land before 1970 ({landed_ms} ms)"))
            })?;
        write_atomic_at(&path, bytes, Some(landed))?;
        let s = &mut self.tally.sources[source.index()];
        s.files += 1;
        s.lines += lines;
        s.bytes += bytes.len() as u64;
        Ok(rel)
    }

    /// One CSV per business day, published the same evening; 2026-08-12 again the next day
    /// with a corrected rate.
    fn write_fx(&mut self) -> Result<()> {
        let mut rng = Rng::stream(self.seed, TAG_FX, 0);
        let mut rate: i64 = 1_368_000 + rng.range(-3_000, 3_000);
        let mut rows = Vec::new();
        let mut holidays = Vec::new();
        for day in FX_FIRST_DAY..=FX_LAST_DAY {
            let step = rng.range(-3_500, 3_500) + (1_370_000 - rate) / 25;
            let jitter = rng.range(0, 14 * 60) * SECOND;
            if !is_business_day(day) {
                if time::weekday(day) < 5 {
                    holidays.push(day);
                }
                continue;
            }
            rate += step;
            let published = day * DAY + 20 * HOUR + 30 * MINUTE + jitter;
            let mut published_rates = vec![(published, rate)];
            let mut corrected_from = None;
            if day == FX_REPUBLISHED_DAY {
                let error = rng.range(8_000, 30_000) * if rng.below(2) == 0 { 1 } else { -1 };
                corrected_from = Some(rate + error);
                published_rates = vec![
                    (published, rate + error),
                    (
                        (day + 1) * DAY + 13 * HOUR + rng.range(0, 40 * 60) * SECOND,
                        rate,
                    ),
                ];
            }
            let mut files = Vec::new();
            for (at, r) in &published_rates {
                let date = time::date_string(day);
                let body = format!(
                    "rate_date,base,quote,rate\n{date},USD,CAD,{}\n",
                    format_rate_micros(*r)
                );
                files.push(self.put(Source::FxRates, *at, &date, body.as_bytes(), 1)?);
            }
            if let (Some(wrong), [first, second]) = (corrected_from, files.as_slice()) {
                self.tally.faults.republished_rates += 1;
                self.tally.fx.republished.push(Republished {
                    rate_date: naive_date(day)?,
                    original_rate_micros: wrong,
                    corrected_rate_micros: rate,
                    original_file: first.clone(),
                    corrected_file: second.clone(),
                });
            }
            rows.push(FxRateTruth {
                rate_date: naive_date(day)?,
                rate_micros: rate,
                published: published_rates.len() as u32,
                corrected_from_micros: corrected_from,
            });
        }
        self.tally.fx.holidays = holidays
            .into_iter()
            .map(naive_date)
            .collect::<Result<_>>()?;
        self.tally.fx.first_rate_date = rows.first().map(|r| r.rate_date);
        self.tally.fx.last_rate_date = rows.last().map(|r| r.rate_date);
        self.tally.fx.rate_dates = rows.len() as u64;
        let mut csv = format!("{}\n", FxRateTruth::HEADER);
        for r in &rows {
            csv.push_str(&format!(
                "{},{},{},{}\n",
                r.rate_date,
                format_rate_micros(r.rate_micros),
                r.published,
                r.corrected_from_micros
                    .map(format_rate_micros)
                    .unwrap_or_default()
            ));
        }
        write_atomic(&self.truth.dir.join(FxRateTruth::FILE), csv.as_bytes())?;
        self.fx_rows = rows;
        Ok(())
    }

    /// The processor's daily totals, one file per UTC day, landing the next morning.
    fn write_settlements(&mut self) -> Result<()> {
        for day in SETTLEMENT_FIRST_DAY..=SETTLEMENT_LAST_DAY {
            let mut rng = Rng::stream(self.seed, TAG_SETTLE, day as u64);
            let at = (day + 1) * DAY + 6 * HOUR + rng.range(0, 90 * 60) * SECOND;
            let date = time::date_string(day);
            let totals = self.days.get(&day).copied().unwrap_or_default();
            let mut body =
                String::from("settlement_date,currency,gross_minor,refunds_minor,net_minor\n");
            for (i, cur) in ["cad", "usd"].into_iter().enumerate() {
                let t = totals[i];
                body.push_str(&format!(
                    "{date},{cur},{},{},{}\n",
                    t.captured,
                    t.refunded,
                    t.captured - t.refunded
                ));
            }
            self.put(Source::Settlements, at, &date, body.as_bytes(), 2)?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Tally> {
        let truth_dir = self.truth.dir.clone();
        // daily.csv, and the months' CAD equivalents.
        let mut daily = format!("{}\n", DailyTruth::HEADER);
        let first_day = time::day_of(ORDERS_FROM);
        let last_day = time::day_of(ARRIVALS_UNTIL) - 1;
        for day in first_day..=last_day {
            let totals = self.days.get(&day).copied().unwrap_or_default();
            let rate = self
                .fx_rows
                .iter()
                .rev()
                .find(|r| naive_date(day).is_ok_and(|d| r.rate_date <= d));
            let (rate_date, rate_micros) =
                rate.map_or((None, 1_000_000), |r| (Some(r.rate_date), r.rate_micros));
            let date = time::date_string(day);
            for (i, cur) in ["cad", "usd"].into_iter().enumerate() {
                let t = totals[i];
                let net = t.captured - t.refunded;
                let (rd, rs, conv) = if i == 0 {
                    (String::new(), String::new(), 1_000_000)
                } else {
                    (
                        rate_date.map(|d| d.to_string()).unwrap_or_default(),
                        format_rate_micros(rate_micros),
                        rate_micros,
                    )
                };
                let net_cad = mul_div_round(net, conv, 1_000_000);
                daily.push_str(&format!(
                    "{date},{cur},{},{},{net},{},{},{rd},{rs},{net_cad},{}\n",
                    t.captured, t.refunded, t.captures, t.refunds, t.net_cad_by_event
                ));
                let month = self.month(day * DAY);
                let gross_cad = mul_div_round(t.captured, conv, 1_000_000);
                let refunds_cad = mul_div_round(t.refunded, conv, 1_000_000);
                if i == 0 {
                    month.captured_cad_minor += t.captured;
                    month.refunded_cad_minor += t.refunded;
                } else {
                    month.captured_usd_minor += t.captured;
                    month.refunded_usd_minor += t.refunded;
                }
                month.gross_cad_equivalent_minor += gross_cad;
                month.refunds_cad_equivalent_minor += refunds_cad;
                month.net_cad_equivalent_minor += gross_cad - refunds_cad;
            }
        }
        write_atomic(&truth_dir.join(DailyTruth::FILE), daily.as_bytes())?;
        for m in self.months.values_mut() {
            let usd_cad = m.gross_cad_equivalent_minor - m.captured_cad_minor;
            m.usd_share_permille = if m.gross_cad_equivalent_minor > 0 {
                (usd_cad * 1000 / m.gross_cad_equivalent_minor) as u64
            } else {
                0
            };
        }

        // awaiting.csv
        let mut awaiting = format!("{}\n", crate::truth::AwaitingTruth::HEADER);
        let mut sum = 0u64;
        let mut n = 0u64;
        let mut tail = [0u64; 6];
        for (k, a) in self.awaiting.iter_mut().enumerate() {
            for (j, t) in tail.iter_mut().enumerate() {
                *t += self.awaiting_tail[k][j];
                a[j] += *t;
            }
            let a = &*a;
            let at = checkpoint_ms(k);
            awaiting.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                time::rfc3339_ms(at),
                a[0],
                a[1],
                a[2],
                a[3],
                a[4],
                a[5]
            ));
            if (ORDERS_FROM + 7 * DAY..ORDERS_UNTIL).contains(&at) {
                sum += a[0];
                n += 1;
            }
        }
        write_atomic(&truth_dir.join(AwaitingTruth::FILE), awaiting.as_bytes())?;

        // bridge.csv and two_answers.csv
        let mut bridge = format!("{}\n", crate::truth::BridgeTruth::HEADER);
        let mut answers = format!("{}\n", crate::truth::AnswersTruth::HEADER);
        for ((y, m), month) in &self.weighed {
            for (t, w) in month.as_ofs.iter().zip(&month.at) {
                let at = time::rfc3339_ms(*t);
                bridge.push_str(&format!(
                    "{y:04}-{m:02},{at},{},{},{},{},{},{},{}\n",
                    w.naive, w.resent, w.retries, w.v2_null, w.refunds, w.usd, w.cash
                ));
                answers.push_str(&format!("{y:04}-{m:02},{at},{},{}\n", w.cash, w.orders));
            }
        }
        write_atomic(
            &truth_dir.join(crate::truth::BridgeTruth::FILE),
            bridge.as_bytes(),
        )?;
        write_atomic(
            &truth_dir.join(crate::truth::AnswersTruth::FILE),
            answers.as_bytes(),
        )?;
        self.tally.volume.awaiting_shipment_mean = sum.checked_div(n).unwrap_or(0);
        self.tally.volume.months = std::mem::take(&mut self.months).into_values().collect();
        self.truth.finish()?;

        let summary = TruthSummary {
            generator: format!("sugarbush {}", crate::GENERATOR_VERSION),
            seed: self.seed,
            scale: self.scale,
            season: SeasonWindow {
                orders_from: time::to_datetime(ORDERS_FROM),
                orders_until: time::to_datetime(ORDERS_UNTIL),
                arrivals_until: time::to_datetime(ARRIVALS_UNTIL),
                api_change_at: time::to_datetime(API_CHANGE),
                business_tz: "America/Halifax (UTC-3 all season)".to_string(),
            },
            sources: self.tally.sources.to_vec(),
            faults: self.tally.faults.clone(),
            volume: self.tally.volume.clone(),
            fx: self.tally.fx.clone(),
            resent: self.tally.resent.clone(),
        };
        let path = truth_dir.join("summary.json");
        let mut json =
            serde_json::to_vec_pretty(&summary).map_err(|source| SugarbushError::Json {
                path: path.clone(),
                source,
            })?;
        json.push(b'\n');
        write_atomic(&path, &json)?;
        write_atomic(
            &truth_dir.join("README.md"),
            crate::truth::README.as_bytes(),
        )?;
        Ok(self.tally)
    }
}

fn naive_date(day: i64) -> Result<chrono::NaiveDate> {
    let (y, m, d) = time::civil_from_days(day);
    chrono::NaiveDate::from_ymd_opt(y as i32, m as u32, d as u32)
        .ok_or_else(|| SugarbushError::Internal(format!("day {day} is not a date")))
}

/// A basket: one to four items at whole-dollar prices (USD prices are 80% of CAD ones),
/// shipping under a threshold, then the region's sales tax, rounded to the cent.
fn order_total(rng: &mut Rng, usd: bool, tax_ppm: i64) -> i64 {
    let items = rng.weighted(&ITEM_COUNT_WEIGHTS) + 1;
    let mut subtotal = 0;
    for _ in 0..items {
        let dollars = PRICES[rng.weighted(&PRICE_WEIGHTS)];
        let dollars = if usd { (dollars * 4 + 2) / 5 } else { dollars };
        subtotal += dollars * 100;
    }
    let shipping = match (usd, subtotal) {
        (false, s) if s < 10_000 => 1_295,
        (true, s) if s < 7_500 => 995,
        _ => 0,
    };
    let base = subtotal + shipping;
    base + mul_div_round(base, tax_ppm, 1_000_000)
}

/// How the processor delivers one event: usually within seconds, sometimes an hour to thirty
/// hours late; rarely a truncated line first (then a retry); about 1 in 40 a second time.
fn plan_deliveries(rng: &mut Rng, created_ms: i64) -> Vec<Attempt> {
    let late = rng.chance_ppm(P_LATE_WEBHOOK);
    let first = created_ms
        + if late {
            rng.range(HOUR, 30 * HOUR)
        } else {
            rng.range(300, 20 * SECOND)
        };
    let truncated = rng.chance_ppm(P_TRUNCATED);
    let cut = rng.range(150, 900) as u16;
    let retry = first + rng.range(MINUTE, 2 * HOUR);
    let duplicate = rng.chance_ppm(P_DUPLICATE);
    let again = rng.range(10 * SECOND, 6 * HOUR);
    let mut attempts = Vec::with_capacity(3);
    let complete_at = if truncated {
        attempts.push(Attempt {
            receipt: first,
            truncated_permille: cut,
        });
        retry
    } else {
        first
    };
    attempts.push(Attempt {
        receipt: complete_at,
        truncated_permille: 0,
    });
    if duplicate {
        attempts.push(Attempt {
            receipt: complete_at + again,
            truncated_permille: 0,
        });
    }
    attempts
}

/// `43035` → `43,035`: digit grouping for reports (the tap's and the season's).
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(mul_div_round(5, 1, 10), 1);
        assert_eq!(mul_div_round(-5, 1, 10), -1);
        assert_eq!(mul_div_round(4, 1, 10), 0);
        assert_eq!(mul_div_round(10_000, 1_371_234, 1_000_000), 13_712);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1_234), "1,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn hourly_files_land_after_their_hour() {
        for h in 0..200 {
            let at = hourly_landing(1, Source::Orders, h);
            let end = ORDERS_FROM + (h + 1) * HOUR;
            assert!(at >= end + 2 * SECOND && at <= end + 50 * SECOND);
        }
    }
}
