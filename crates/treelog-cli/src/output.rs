//! The CLI's standard output: buffered, fallible writes (a closed pipe is an
//! error to stop on, never a panic) and the quoting of names for humans.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::io::{BufWriter, Stdout, Write};

use crate::error::{Error, Result};

/// Standard output of one CLI run. Every printing path goes through it:
/// `println!` panics when the reader of a pipe has gone (`| head`).
pub(crate) struct Out {
    pub json: bool,
    w: RefCell<BufWriter<Stdout>>,
    /// Set once a write failed because the reader went away; the run then
    /// ends quietly (see [`crate::run::run`]).
    closed: Cell<bool>,
}

impl Out {
    pub(crate) fn new(json: bool) -> Out {
        Out {
            json,
            w: RefCell::new(BufWriter::with_capacity(64 * 1024, std::io::stdout())),
            closed: Cell::new(false),
        }
    }

    fn io(&self, f: impl FnOnce(&mut BufWriter<Stdout>) -> std::io::Result<()>) -> Result<()> {
        if self.closed.get() {
            return Err(Error::Io(std::io::ErrorKind::BrokenPipe.into()));
        }
        f(&mut self.w.borrow_mut()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                self.closed.set(true);
            }
            Error::Io(e)
        })
    }

    /// Bytes as they are (a link's target, as `readlink` prints it).
    pub(crate) fn write_bytes(&self, b: &[u8]) -> Result<()> {
        self.io(|w| w.write_all(b))
    }

    /// Writes `s` as is (buffered).
    pub(crate) fn write_str(&self, s: &str) -> Result<()> {
        self.io(|w| w.write_all(s.as_bytes()))
    }

    /// Writes one formatted line (buffered); use through [`outln!`].
    pub(crate) fn line(&self, args: std::fmt::Arguments<'_>) -> Result<()> {
        self.io(|w| {
            w.write_fmt(args)?;
            w.write_all(b"\n")
        })
    }

    /// Hands everything buffered to the OS; an error means it was not all
    /// written.
    pub(crate) fn flush(&self) -> Result<()> {
        self.io(|w| w.flush())
    }

    /// Whether the reader of standard output went away.
    pub(crate) fn closed(&self) -> bool {
        self.closed.get()
    }

    pub(crate) fn print_json(&self, v: &impl serde::Serialize) -> Result<()> {
        let s = serde_json::to_string(v)
            .map_err(|e| Error::InvalidArgument(format!("cannot encode JSON: {e}")))?;
        self.line(format_args!("{s}"))
    }
}

/// `writeln!` for [`Out`]: `outln!(out, "{x}")?`.
macro_rules! outln {
    ($out:expr) => {
        $out.line(format_args!(""))
    };
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// How a character affects shell quoting (GNU quotearg's rules).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Printed as is, quoted or not.
    Safe,
    /// Printed as is, but forces quoting; fine inside double quotes too.
    QuoteCompat,
    /// Forces quoting; only single quotes keep it literal.
    Quote,
    /// Does not force quoting (`a{b`, `x#` stay bare), but a quoted name
    /// with it gets single quotes, as GNU does.
    Incompat,
    /// A control character: written as a `$'…'` escape.
    Control,
}

fn class(c: char, first: bool, alone: bool) -> Class {
    match c {
        c if c.is_control() => Class::Control,
        '{' | '}' if alone => Class::QuoteCompat,
        '{' | '}' => Class::Incompat,
        '#' | '~' if first => Class::QuoteCompat,
        '#' | '~' => Class::Incompat,
        ' ' | '\'' => Class::QuoteCompat,
        '!' | '"' | '$' | '&' | '(' | ')' | '*' | ';' | '<' | '=' | '>' | '?' | '[' | '\\'
        | '^' | '`' | '|' => Class::Quote,
        _ => Class::Safe,
    }
}

/// A name (or path) as GNU `ls` shows it on a terminal by default
/// (`--quoting-style=shell-escape`): bare when nothing in it is special to
/// a shell, else quoted so that pasting it into a shell gives the name
/// back, with control characters as `$'\n'`-style escapes:
/// `a b` → `'a b'`, `a'b` → `"a'b"`, a newline between `a` and `b` →
/// `'a'$'\n''b'`. A newline or escape sequence in a name can then neither
/// fake a second entry nor reach the terminal.
pub(crate) fn quote<S: AsRef<[u8]> + ?Sized>(s: &S) -> Cow<'_, str> {
    let bytes = s.as_ref();
    // Names are bytes: one that is not UTF-8 gets its stray bytes as
    // `$'\377'` escapes (as GNU `ls` shows them), which a shell turns back
    // into the same bytes.
    let units: Vec<Unit> = units(bytes);
    let alone = units.len() == 1;
    let classes: Vec<Class> = units
        .iter()
        .enumerate()
        .map(|(i, u)| match u {
            Unit::Char(c) => class(*c, i == 0, alone),
            Unit::Byte(_) => Class::Control,
        })
        .collect();
    let needs = bytes.is_empty()
        || classes
            .iter()
            .any(|k| matches!(k, Class::QuoteCompat | Class::Quote | Class::Control));
    if !needs {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return Cow::Borrowed(text);
        }
    }
    let has_single = bytes.contains(&b'\'');
    if has_single
        && classes
            .iter()
            .all(|k| matches!(k, Class::Safe | Class::QuoteCompat))
    {
        // Nothing in it is special inside double quotes.
        return Cow::Owned(format!("\"{}\"", String::from_utf8_lossy(bytes)));
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push('\'');
    let mut in_escape = false;
    for (u, k) in units.into_iter().zip(classes) {
        if k == Class::Control {
            if !in_escape {
                out.push_str("'$'");
                in_escape = true;
            }
            match u {
                Unit::Char(c) => push_escape(&mut out, c),
                Unit::Byte(b) => out.push_str(&format!("\\{b:03o}")),
            }
            continue;
        }
        if in_escape {
            out.push_str("''");
            in_escape = false;
        }
        match u {
            Unit::Char('\'') => out.push_str("'\\''"),
            Unit::Char(c) => out.push(c),
            Unit::Byte(_) => {}
        }
    }
    // Closes the outer quote, or a trailing `$'…'` (GNU then leaves out
    // the empty `''` that would follow).
    out.push('\'');
    Cow::Owned(out)
}

/// A character of a name, or a byte that is not part of one (not UTF-8).
#[derive(Clone, Copy)]
enum Unit {
    Char(char),
    Byte(u8),
}

fn units(mut b: &[u8]) -> Vec<Unit> {
    let mut out = Vec::with_capacity(b.len());
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(text) => {
                out.extend(text.chars().map(Unit::Char));
                break;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                // `good` is UTF-8 by the error's own account.
                out.extend(String::from_utf8_lossy(good).chars().map(Unit::Char));
                let bad = e.error_len().unwrap_or(rest.len()).max(1);
                out.extend(rest[..bad].iter().map(|&x| Unit::Byte(x)));
                b = &rest[bad..];
            }
        }
    }
    out
}

fn push_escape(out: &mut String, c: char) {
    let letter = match c {
        '\x07' => Some('a'),
        '\x08' => Some('b'),
        '\x0c' => Some('f'),
        '\n' => Some('n'),
        '\r' => Some('r'),
        '\t' => Some('t'),
        '\x0b' => Some('v'),
        _ => None,
    };
    match letter {
        Some(l) => {
            out.push('\\');
            out.push(l);
        }
        None => {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\{b:03o}"));
            }
        }
    }
}

/// A progress bar on standard error with `template` (which may use
/// `{rate}`, a whole number per second), hidden when `quiet` or when
/// standard error is not a terminal.
pub(crate) fn progress_bar(quiet: bool, template: &str) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    let target = if quiet || !std::io::stderr().is_terminal() {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let pb = ProgressBar::with_draw_target(Some(0), target);
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("a valid template")
            .with_key(
                "rate",
                |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}", s.per_sec());
                },
            ),
    );
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    pb
}

#[cfg(test)]
mod tests {
    use super::quote;

    /// Expected strings are GNU coreutils 9.1 `ls --quoting-style=shell-escape`.
    #[test]
    fn quotes_like_gnu_ls() {
        for (name, want) in [
            ("plain", "plain"),
            ("a b", "'a b'"),
            ("a'b", "\"a'b\""),
            ("a'b c", "\"a'b c\""),
            ("#a'b", "\"#a'b\""),
            ("a'@b", "\"a'@b\""),
            ("a'", "\"a'\""),
            ("a\"b", "'a\"b'"),
            ("a$b", "'a$b'"),
            ("a'b$c", "'a'\\''b$c'"),
            ("a'#b", "'a'\\''#b'"),
            ("a'{b", "'a'\\''{b'"),
            ("a\nb", "'a'$'\\n''b'"),
            ("a\tb", "'a'$'\\t''b'"),
            ("a\n", "'a'$'\\n'"),
            ("\n", "''$'\\n'"),
            ("a\n\nb", "'a'$'\\n\\n''b'"),
            ("a'\nb", "'a'\\'''$'\\n''b'"),
            ("\x1b[31m", "''$'\\033''[31m'"),
            ("a\x7fb", "'a'$'\\177''b'"),
            ("\u{85}", "''$'\\302\\205'"),
            ("a=b", "'a=b'"),
            ("a?b", "'a?b'"),
            ("a[b", "'a[b'"),
            ("a]b", "a]b"),
            ("#x", "'#x'"),
            ("x#", "x#"),
            ("~x", "'~x'"),
            ("x~", "x~"),
            ("a{b", "a{b"),
            ("{", "'{'"),
            ("{}", "{}"),
            ("-x", "-x"),
            ("a%b+c,d:e@f", "a%b+c,d:e@f"),
            ("é", "é"),
            ("é b", "'é b'"),
            ("/a/b c", "'/a/b c'"),
        ] {
            assert_eq!(quote(name), want, "{name:?}");
        }
        // Bytes that are not UTF-8 (GNU `ls` in a UTF-8 locale).
        for (name, want) in [
            (&b"bad\xff"[..], "'bad'$'\\377'"),
            (b"\xff", "''$'\\377'"),
            (b"caf\xe9 x", "'caf'$'\\351'' x'"),
            (b"a\xc3", "'a'$'\\303'"),
        ] {
            assert_eq!(quote(name), want, "{name:?}");
        }
    }
}
