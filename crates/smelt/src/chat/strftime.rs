//! `strftime_now(format)`, the date global that Llama 3.x, Granite, Mistral
//! and gpt-oss templates call to write "Today Date: 15 Jan 2026".
//!
//! The time is UTC: a server's prompts should not depend on the zone of the
//! machine it happens to run on.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where `strftime_now` gets its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    System,
    /// A fixed instant in seconds since the Unix epoch, for reproducible
    /// renders (tests, reference comparisons).
    Fixed(i64),
}

impl Clock {
    pub fn now(self) -> i64 {
        match self {
            Clock::Fixed(t) => t,
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A broken-down UTC time.
struct Tm {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    /// 0 = Monday
    weekday: usize,
    /// 1..=366
    yday: i64,
}

impl Tm {
    fn from_unix(t: i64) -> Tm {
        let days = t.div_euclid(86_400);
        let secs = t.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let jan1 = days_from_civil(year, 1, 1);
        Tm {
            year,
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            // 1970-01-01 was a Thursday.
            weekday: (days + 3).rem_euclid(7) as usize,
            yday: days - jan1 + 1,
        }
    }
}

/// Formats the Unix time `t` with C's `strftime` conversions (the ones
/// templates use, plus the other common ones). Unknown conversions are
/// copied as they are, like glibc does.
pub fn strftime(format: &str, t: i64) -> String {
    let tm = Tm::from_unix(t);
    let month = MONTHS[(tm.month - 1) as usize];
    let weekday = WEEKDAYS[tm.weekday];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&tm.year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", tm.year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{:02}", tm.month)),
            Some('d') => out.push_str(&format!("{:02}", tm.day)),
            Some('e') => out.push_str(&format!("{:2}", tm.day)),
            Some('b') | Some('h') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('H') => out.push_str(&format!("{:02}", tm.hour)),
            Some('I') => out.push_str(&format!("{:02}", (tm.hour + 11) % 12 + 1)),
            Some('p') => out.push_str(if tm.hour < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{:02}", tm.minute)),
            Some('S') => out.push_str(&format!("{:02}", tm.second)),
            Some('j') => out.push_str(&format!("{:03}", tm.yday)),
            Some('F') => out.push_str(&format!("{}-{:02}-{:02}", tm.year, tm.month, tm.day)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (y, m, d)
/// in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected strings from `datetime.fromtimestamp(t, timezone.utc).strftime(f)`.
    #[test]
    fn matches_python() {
        let t = 1_768_435_200 + 13 * 3600 + 5 * 60 + 9; // 2026-01-15 13:05:09
        assert_eq!(strftime("%d %b %Y", t), "15 Jan 2026");
        assert_eq!(strftime("%B %d, %Y", t), "January 15, 2026");
        assert_eq!(strftime("%Y-%m-%d", t), "2026-01-15");
        assert_eq!(
            strftime("%A %a %H:%M:%S %I%p %j %y %%", t),
            "Thursday Thu 13:05:09 01PM 015 26 %"
        );
        // A leap day and a date before the epoch.
        assert_eq!(strftime("%F %A", 951_782_400), "2000-02-29 Tuesday");
        assert_eq!(strftime("%F %j", -86_400), "1969-12-31 365");
    }
}
