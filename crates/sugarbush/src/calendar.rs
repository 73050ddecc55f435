//! The season's fixed calendar: when orders are taken, when the US account changes API
//! version, which days have FX rates, when files stop arriving.

use crate::time::{DAY, HOUR, days_from_civil, ms_of_date, weekday};

/// First instant an order can be created: 2026-08-01T00:00:00Z.
pub(crate) const ORDERS_FROM: i64 = ms_of_date(2026, 8, 1);
/// Orders and charges are created before 2026-10-01T00:00:00Z.
pub(crate) const ORDERS_UNTIL: i64 = ms_of_date(2026, 10, 1);
/// USD events created from 2026-08-17T00:00:00Z on use api_version 2026-08-01.
pub(crate) const API_CHANGE: i64 = ms_of_date(2026, 8, 17);
/// Refunds are created before 2026-10-29T00:00:00Z, so late deliveries still land in October.
pub(crate) const REFUNDS_UNTIL: i64 = ms_of_date(2026, 10, 29);
/// Every file arrives before 2026-11-01T00:00:00Z.
pub(crate) const ARRIVALS_UNTIL: i64 = ms_of_date(2026, 11, 1);
/// Hours simulated, 2026-08-01T00 to 2026-10-31T23.
pub(crate) const SEASON_HOURS: i64 = (ARRIVALS_UNTIL - ORDERS_FROM) / HOUR;
/// Halifax is UTC−3 (ADT) for the whole season (DST ends 2026-11-01).
pub(crate) const HALIFAX_OFFSET: i64 = -3 * HOUR;

/// First and last FX rate dates: Friday 2026-07-31 (so the first weekend has a rate) to
/// Friday 2026-10-30.
pub(crate) const FX_FIRST_DAY: i64 = days_from_civil(2026, 7, 31);
pub(crate) const FX_LAST_DAY: i64 = days_from_civil(2026, 10, 30);
/// Weekdays without a rate: Labour Day, the National Day for Truth and Reconciliation,
/// Thanksgiving.
pub(crate) const FX_HOLIDAYS: [i64; 3] = [
    days_from_civil(2026, 9, 7),
    days_from_civil(2026, 9, 30),
    days_from_civil(2026, 10, 12),
];
/// The rate date published twice, the second time with a corrected rate.
pub(crate) const FX_REPUBLISHED_DAY: i64 = days_from_civil(2026, 8, 12);

/// Settlement reports cover the UTC days 2026-08-01 ..= 2026-10-30, each arriving the next day.
pub(crate) const SETTLEMENT_FIRST_DAY: i64 = days_from_civil(2026, 8, 1);
pub(crate) const SETTLEMENT_LAST_DAY: i64 = days_from_civil(2026, 10, 30);

/// Awaiting-shipment checkpoints: 12:00 UTC of every day 2026-08-01 ..= 2026-10-31.
pub(crate) const CHECKPOINTS: usize = 92;
pub(crate) const fn checkpoint_ms(k: usize) -> i64 {
    ORDERS_FROM + (k as i64) * DAY + 12 * HOUR
}

/// Whether the Bank publishes a rate for this day.
pub(crate) fn is_business_day(day: i64) -> bool {
    weekday(day) < 5 && !FX_HOLIDAYS.contains(&day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calendar_holds_together() {
        assert_eq!(SEASON_HOURS, 92 * 24);
        assert_eq!(checkpoint_ms(CHECKPOINTS - 1) + 12 * HOUR, ARRIVALS_UNTIL);
        assert!(is_business_day(FX_FIRST_DAY));
        assert!(is_business_day(FX_LAST_DAY));
        assert!(is_business_day(FX_REPUBLISHED_DAY));
        assert!(!is_business_day(days_from_civil(2026, 8, 1)));
        assert!(!is_business_day(days_from_civil(2026, 9, 7)));
    }
}
