//! Names and paths.
//!
//! A name is non-empty, at most 255 bytes, contains no `/` and no NUL, and is
//! not `.` or `..`. A path is absolute: `/` followed by names separated by
//! single slashes; one trailing slash is tolerated (`/a/b/` is `/a/b`).

use crate::bytestr::ByteString;
use crate::error::{Error, Result};

pub const MAX_NAME_LEN: usize = 255;
/// Upper bound on a path's length, to keep records and frames bounded.
pub const MAX_PATH_LEN: usize = 4096;

/// At most this many bytes of a rejected name or path go into the error.
const SHOWN: usize = 300;

fn shown(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(SHOWN)]).into_owned()
}

/// Checks a name's bytes (any bytes but `/` and NUL: POSIX names need not
/// be UTF-8).
pub fn validate_name<N: AsRef<[u8]> + ?Sized>(name: &N) -> Result<()> {
    let name = name.as_ref();
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_NAME_LEN {
        "longer than 255 bytes"
    } else if name.contains(&b'/') {
        "contains '/'"
    } else if name.contains(&0) {
        "contains NUL"
    } else if name == b"." || name == b".." {
        "'.' and '..' are reserved"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: shown(name),
        reason,
    })
}

/// Splits an absolute path into validated components (empty for `/`).
pub fn components<P: AsRef<[u8]> + ?Sized>(path: &P) -> Result<Vec<&[u8]>> {
    let path = path.as_ref();
    let invalid = |reason| Error::InvalidPath {
        path: shown(path),
        reason,
    };
    if path.len() > MAX_PATH_LEN {
        return Err(invalid("longer than 4096 bytes"));
    }
    let rest = path
        .strip_prefix(b"/")
        .ok_or_else(|| invalid("not absolute"))?;
    let rest = rest.strip_suffix(b"/").unwrap_or(rest);
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for c in rest.split(|b| *b == b'/') {
        if c.is_empty() {
            return Err(invalid("empty component ('//')"));
        }
        validate_name(c)?;
        out.push(c);
    }
    Ok(out)
}

/// The canonical form of a path (`/a/b`, or `/` for the root).
pub fn canonical<P: AsRef<[u8]> + ?Sized>(path: &P) -> Result<ByteString> {
    Ok(join_all(&components(path)?))
}

pub fn join_all<C: AsRef<[u8]>>(comps: &[C]) -> ByteString {
    if comps.is_empty() {
        return "/".into();
    }
    let mut s = Vec::with_capacity(comps.iter().map(|c| c.as_ref().len() + 1).sum());
    for c in comps {
        s.push(b'/');
        s.extend_from_slice(c.as_ref());
    }
    s.into()
}

/// `parent` + `/` + `name`.
pub fn join(parent: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> ByteString {
    let (parent, name) = (parent.as_ref(), name.as_ref());
    let mut s = Vec::with_capacity(parent.len() + 1 + name.len());
    if parent != b"/" {
        s.extend_from_slice(parent);
    }
    s.push(b'/');
    s.extend_from_slice(name);
    s.into()
}

/// True when `path` is `ancestor` or lies below it.
pub fn is_within(path: impl AsRef<[u8]>, ancestor: impl AsRef<[u8]>) -> bool {
    let (path, ancestor) = (path.as_ref(), ancestor.as_ref());
    ancestor == b"/"
        || path == ancestor
        || (path.starts_with(ancestor) && path.get(ancestor.len()) == Some(&b'/'))
}

/// Bytes shown in a message: UTF-8 as it is, other bytes as U+FFFD.
pub fn display(b: &[u8]) -> &bstr::BStr {
    bstr::BStr::new(b)
}

/// The last component of a canonical path (empty for `/`).
pub fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|b| *b == b'/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn names() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"x".repeat(255)).is_ok());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert_eq!(
                validate_name(bad).unwrap_err().kind(),
                ErrorKind::InvalidName,
                "{bad:?}"
            );
        }
        assert_eq!(
            validate_name(&"x".repeat(256)).unwrap_err().kind(),
            ErrorKind::InvalidName
        );
        // 255 bytes, counted in bytes not chars.
        assert!(validate_name(&"é".repeat(128)).is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(components("/").unwrap(), Vec::<&[u8]>::new());
        assert_eq!(components("/a/b").unwrap(), vec![b"a", b"b"]);
        assert_eq!(components("/a/b/").unwrap(), vec![b"a", b"b"]);
        assert_eq!(
            components("a/b").unwrap_err().kind(),
            ErrorKind::InvalidPath
        );
        assert_eq!(components("").unwrap_err().kind(), ErrorKind::InvalidPath);
        assert_eq!(
            components("/a//b").unwrap_err().kind(),
            ErrorKind::InvalidPath
        );
        assert_eq!(
            components("/a/../b").unwrap_err().kind(),
            ErrorKind::InvalidName
        );
        assert_eq!(canonical("/a/b/").unwrap(), "/a/b");
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(!is_within("/ab", "/a"));
        assert!(is_within("/ab", "/"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", b"b\xff"), *b"/a/b\xff".as_slice());
        assert_eq!(file_name(b"/a/b"), b"b");
    }

    #[test]
    fn bytes() {
        // Any bytes but '/' and NUL: Latin-1 and invalid UTF-8 are names.
        for good in [&b"bad\xff"[..], b"caf\xe9", b"\xc3", b"\x01\x7f"] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
        for bad in [&b"a/\xff"[..], b"\xff\0", b"", b".", b".."] {
            assert_eq!(
                validate_name(bad).unwrap_err().kind(),
                ErrorKind::InvalidName,
                "{bad:?}"
            );
        }
        assert!(validate_name(&[0xffu8; 255]).is_ok());
        assert!(validate_name(&[0xffu8; 256]).is_err());
        let p = b"/q/bad\xff/caf\xe9/";
        assert_eq!(
            components(p).unwrap(),
            vec![&b"q"[..], b"bad\xff", b"caf\xe9"]
        );
        assert_eq!(canonical(p).unwrap(), *b"/q/bad\xff/caf\xe9".as_slice());
        let mut long = b"/".to_vec();
        while long.len() < MAX_PATH_LEN {
            long.extend_from_slice(b"\xff\xfe\xfd/");
        }
        long.truncate(MAX_PATH_LEN);
        assert!(components(&long).is_ok(), "{} bytes", long.len());
        long.push(b'x');
        assert_eq!(
            components(&long).unwrap_err().kind(),
            ErrorKind::InvalidPath
        );
        // The error shows the name lossily, bounded.
        let e = validate_name(&[0xffu8; 1000]).unwrap_err();
        assert!(e.to_string().contains('\u{fffd}'), "{e}");
    }
}
