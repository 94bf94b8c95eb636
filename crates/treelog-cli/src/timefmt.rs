//! Times and sizes in `ls -l` lines, as GNU `ls` shows them:
//! `--time-style` (`locale`, `iso`, `long-iso`, `full-iso`, `+FORMAT`) in
//! the local time zone (`TZ`, else the system's), and `-h` sizes.
//!
//! Dates are formatted with `jiff` (strftime conversions, time zones from
//! the system's database), never with the C library's `localtime`, which
//! is not safe beside threads that might change the environment.

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// GNU's "recent": modified within the last six months (half a Gregorian
/// year) and not in the future.
const SIX_MONTHS_MS: i64 = 31_556_952_000 / 2;

/// How `ls -l` shows a modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeStyle {
    /// For times older than six months or in the future.
    old: String,
    /// For recent times.
    recent: String,
}

impl TimeStyle {
    /// GNU's `full-iso`: `2026-11-25 15:52:03.120000000 +0100`.
    pub(crate) fn full_iso() -> TimeStyle {
        TimeStyle::same("%Y-%m-%d %H:%M:%S.%N %z")
    }

    /// GNU's default in the POSIX locale: `Nov 25 15:52`, and
    /// `Nov 25  2025` for a time not recent.
    pub(crate) fn locale() -> TimeStyle {
        TimeStyle {
            old: "%b %e  %Y".into(),
            recent: "%b %e %H:%M".into(),
        }
    }

    fn same(f: &str) -> TimeStyle {
        TimeStyle {
            old: f.into(),
            recent: f.into(),
        }
    }

    /// Parses a `--time-style` (or `TIME_STYLE`) value as GNU `ls` does:
    /// `full-iso`, `long-iso`, `iso` (`11-25 15:52`, or `2025-11-25 ` when
    /// not recent), `locale`, `+FORMAT` (strftime; `+OLD\nRECENT` for two),
    /// and each named one prefixed by `posix-` (the same here: this program
    /// is never localized).
    pub(crate) fn parse(s: &str) -> Result<TimeStyle, String> {
        let style = match s.strip_prefix("posix-").unwrap_or(s) {
            "full-iso" => TimeStyle::full_iso(),
            "long-iso" => TimeStyle::same("%Y-%m-%d %H:%M"),
            "iso" => TimeStyle {
                old: "%Y-%m-%d ".into(),
                recent: "%m-%d %H:%M".into(),
            },
            "locale" => TimeStyle::locale(),
            _ => match s.strip_prefix('+') {
                Some(f) => match f.split_once('\n') {
                    Some((old, recent)) => TimeStyle {
                        old: old.into(),
                        recent: recent.into(),
                    },
                    None => TimeStyle::same(f),
                },
                None => {
                    return Err(format!(
                        "unknown time style {s:?}: use full-iso, long-iso, iso, locale or +FORMAT"
                    ))
                }
            },
        };
        // A bad conversion is a usage error now, not a failure mid-listing.
        let probe = Timestamp::UNIX_EPOCH.to_zoned_datetime(TimeZone::UTC);
        for f in [&style.old, &style.recent] {
            jiff::fmt::strtime::format(f, &probe)
                .map_err(|e| format!("bad time format {f:?}: {e}"))?;
        }
        Ok(style)
    }
}

/// Formats times in one style, relative to one "now".
pub(crate) struct TimeFormatter {
    style: TimeStyle,
    tz: TimeZone,
    now_ms: i64,
}

impl TimeFormatter {
    pub(crate) fn new(style: TimeStyle) -> TimeFormatter {
        TimeFormatter {
            style,
            tz: TimeZone::system(),
            now_ms: Timestamp::now().as_millisecond(),
        }
    }

    /// `ms` (since the epoch) as a date; a time no calendar date can show
    /// (beyond the year 9999) stays a number of milliseconds, as GNU `ls`
    /// prints the seconds of a time it cannot convert.
    pub(crate) fn format(&self, ms: u64) -> String {
        let Some(ts) = i64::try_from(ms)
            .ok()
            .and_then(|m| Timestamp::from_millisecond(m).ok())
        else {
            return ms.to_string();
        };
        let t = ts.as_millisecond();
        let recent = t <= self.now_ms && t > self.now_ms - SIX_MONTHS_MS;
        let f = if recent {
            &self.style.recent
        } else {
            &self.style.old
        };
        let zoned = ts.to_zoned_datetime(self.tz.clone());
        jiff::fmt::strtime::format(f, &zoned).unwrap_or_else(|_| ms.to_string())
    }
}

/// A size as GNU `ls -h` shows it: powers of 1024, rounded up, one decimal
/// below 10 (`1023`, `1.0K`, `1.1K` for 1025 bytes, `10K`, `23M`).
pub(crate) fn human_size(n: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if n < 1024 {
        return n.to_string();
    }
    let n = n as u128;
    let mut unit = 1024u128;
    let mut i = 0;
    while n >= unit * 1024 && i + 1 < UNITS.len() {
        unit *= 1024;
        i += 1;
    }
    loop {
        if n < 10 * unit {
            // Tenths, rounded up; 9.95K and up become 10K.
            let tenths = (n * 10).div_ceil(unit);
            if tenths < 100 {
                return format!("{}.{}{}", tenths / 10, tenths % 10, UNITS[i]);
            }
            return format!("10{}", UNITS[i]);
        }
        let whole = n.div_ceil(unit);
        if whole < 1024 || i + 1 == UNITS.len() {
            return format!("{whole}{}", UNITS[i]);
        }
        // 1023.5K rounds up to 1024K: shown as 1.0M.
        unit *= 1024;
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected strings are GNU coreutils 9.1 `ls -lh` of files of these sizes.
    #[test]
    fn human_sizes_like_gnu_ls() {
        for (n, want) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1.0K"),
            (1025, "1.1K"),
            (1536, "1.5K"),
            (10239, "10K"),
            (10240, "10K"),
            (10241, "11K"),
            (1_048_575, "1.0M"),
            (1_048_576, "1.0M"),
            (24_117_248, "23M"),
            (1_073_741_823, "1.0G"),
            (u64::MAX, "16E"),
        ] {
            assert_eq!(human_size(n), want, "{n}");
        }
    }

    #[test]
    fn styles() {
        let f = |style: &str, ms: u64| {
            let mut t = TimeFormatter::new(TimeStyle::parse(style).unwrap());
            t.tz = TimeZone::UTC;
            t.now_ms = 1_795_000_000_000; // 2026-11-18
            t.format(ms)
        };
        let recent = 1_794_000_000_123; // 2026-11-06 21:20:00.123 UTC
        let old = 1_577_934_245_000; // 2020-01-02 03:04:05 UTC
        assert_eq!(f("long-iso", recent), "2026-11-06 21:20");
        assert_eq!(f("posix-long-iso", old), "2020-01-02 03:04");
        assert_eq!(f("full-iso", recent), "2026-11-06 21:20:00.123000000 +0000");
        assert_eq!(f("iso", recent), "11-06 21:20");
        assert_eq!(f("iso", old), "2020-01-02 ");
        assert_eq!(f("locale", recent), "Nov  6 21:20");
        assert_eq!(f("locale", old), "Jan  2  2020");
        // In the future: not recent.
        assert_eq!(f("locale", 1_796_000_000_000), "Nov 30  2026");
        assert_eq!(f("+%s|%H", old), "1577934245|03");
        assert_eq!(f("+%Y\n%H:%M", old), "2020");
        assert_eq!(f("+%Y\n%H:%M", recent), "21:20");
        assert_eq!(f("long-iso", u64::MAX), u64::MAX.to_string());
        assert!(TimeStyle::parse("nope").is_err());
        assert!(TimeStyle::parse("+%").is_err());
    }
}
