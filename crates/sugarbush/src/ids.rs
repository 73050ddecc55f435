//! Identifiers: a prefix and eleven base-62 characters of a bijective mix of a counter, so two
//! distinct counters can never share an id, and a different seed gives different ids.

use crate::rng::mix64;

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Order,
    Customer,
    Charge,
    Refund,
    Event,
}

impl Kind {
    const fn prefix(self) -> &'static str {
        match self {
            Kind::Order => "ord_",
            Kind::Customer => "cus_",
            Kind::Charge => "ch_",
            Kind::Refund => "re_",
            Kind::Event => "evt_",
        }
    }

    const fn salt(self) -> u64 {
        match self {
            Kind::Order => 0x6f72_6465_7200_0001,
            Kind::Customer => 0x6375_7374_6f6d_0002,
            Kind::Charge => 0x6368_6172_6765_0003,
            Kind::Refund => 0x7265_6675_6e64_0004,
            Kind::Event => 0x6576_656e_7400_0005,
        }
    }
}

/// The id of entity `n` of `kind` in the season of `seed`.
pub(crate) fn id(kind: Kind, seed: u64, n: u64) -> String {
    // mix64 is a bijection and so is xor with a constant: distinct n, distinct ids.
    let mut x = mix64(n ^ mix64(seed ^ kind.salt()));
    let mut buf = [b'0'; 11];
    for slot in buf.iter_mut().rev() {
        *slot = ALPHABET[(x % 62) as usize];
        x /= 62;
    }
    let mut s = String::with_capacity(kind.prefix().len() + 11);
    s.push_str(kind.prefix());
    for c in buf {
        s.push(char::from(c));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_shaped() {
        let mut seen = std::collections::BTreeSet::new();
        for n in 0..20_000 {
            let s = id(Kind::Order, 1, n);
            assert_eq!(s.len(), 15);
            assert!(s.starts_with("ord_"));
            assert!(seen.insert(s));
        }
        assert_ne!(id(Kind::Charge, 1, 5), id(Kind::Charge, 2, 5));
        assert!(id(Kind::Event, 1, 5).starts_with("evt_"));
    }
}
