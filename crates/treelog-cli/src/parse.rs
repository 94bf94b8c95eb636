//! clap's value parsers for the arguments that are not plain numbers or
//! strings.

/// `host:port` or `[v6]:port` (its form only: a host name is resolved
/// when connecting).
pub(crate) fn parse_host_port(s: &str) -> std::result::Result<String, String> {
    treelog_client::Endpoint::parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| match e {
            treelog::Error::InvalidArgument(m) => m,
            e => e.to_string(),
        })
}

/// A count or size: digits, with an optional K, M, G or T (powers of 1024).
pub(crate) fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        Some((i, 'T' | 't')) => (&s[..i], 40),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|e| format!("{s:?} is not a number with an optional K, M, G or T: {e}"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s} is too large"))
}

/// A permission mode in octal (`644`, `0o644`).
pub(crate) fn parse_mode(s: &str) -> std::result::Result<u32, String> {
    let s = s.strip_prefix("0o").unwrap_or(s);
    u32::from_str_radix(s, 8).map_err(|e| format!("mode must be octal: {e}"))
}
