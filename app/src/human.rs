//! Numbers as the applications print them for people: counts and rates as whole numbers with
//! thousands separators (`8,006/s`, never `8005.5955/s`), durations in whole units.

use std::time::Duration;

/// `n` with a comma every three digits: `196000` → `196,000`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `x` rounded to a whole number, with separators: `8005.5955` → `8,006`. Not a number (or
/// negative) prints as `0`.
pub fn whole(x: f64) -> String {
    count(if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    })
}

/// A rate per second as a whole number with separators and `/s`: `8,006/s`.
pub fn rate(per_sec: f64) -> String {
    format!("{}/s", whole(per_sec))
}

/// `n` events over `elapsed`, per second; 0 for no time at all.
pub fn per_sec(n: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// `n` events over `elapsed` as a rate ([`rate`]).
pub fn rate_of(n: u64, elapsed: Duration) -> String {
    rate(per_sec(n, elapsed))
}

/// A duration in whole seconds, minutes or hours, the two largest units: `9 s`, `3 min 20 s`,
/// `1 h 5 min`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_get_a_separator_every_three_digits() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(196_000), "196,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn rates_are_whole_numbers() {
        assert_eq!(rate(8005.5955), "8,006/s");
        assert_eq!(rate(0.4), "0/s");
        assert_eq!(rate(f64::NAN), "0/s");
        assert_eq!(rate(-3.0), "0/s");
        assert_eq!(rate_of(10, Duration::ZERO), "0/s");
        assert_eq!(rate_of(3_000, Duration::from_millis(1500)), "2,000/s");
    }

    #[test]
    fn durations_use_the_two_largest_units() {
        assert_eq!(duration(Duration::from_millis(9_400)), "9 s");
        assert_eq!(duration(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(duration(Duration::from_secs(3_900)), "1 h 5 min");
    }
}
