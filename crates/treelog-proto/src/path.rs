//! Names and paths.
//!
//! A name is non-empty, at most 255 bytes, contains no `/` and no NUL, and is
//! not `.` or `..`. A path is absolute: `/` followed by names separated by
//! single slashes; one trailing slash is tolerated (`/a/b/` is `/a/b`).

use crate::error::{Error, Result};

pub const MAX_NAME_LEN: usize = 255;
/// Upper bound on a path's length, to keep records and frames bounded.
pub const MAX_PATH_LEN: usize = 4096;

pub fn validate_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_NAME_LEN {
        "longer than 255 bytes"
    } else if name.contains('/') {
        "contains '/'"
    } else if name.contains('\0') {
        "contains NUL"
    } else if name == "." || name == ".." {
        "'.' and '..' are reserved"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.chars().take(300).collect(),
        reason,
    })
}

/// Splits an absolute path into validated components (empty for `/`).
pub fn components(path: &str) -> Result<Vec<&str>> {
    let invalid = |reason| Error::InvalidPath {
        path: path.chars().take(300).collect(),
        reason,
    };
    if path.len() > MAX_PATH_LEN {
        return Err(invalid("longer than 4096 bytes"));
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("not absolute"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for c in rest.split('/') {
        if c.is_empty() {
            return Err(invalid("empty component ('//')"));
        }
        validate_name(c)?;
        out.push(c);
    }
    Ok(out)
}

/// The canonical form of a path (`/a/b`, or `/` for the root).
pub fn canonical(path: &str) -> Result<String> {
    Ok(join_all(&components(path)?))
}

pub fn join_all(comps: &[&str]) -> String {
    if comps.is_empty() {
        return "/".to_owned();
    }
    let mut s = String::with_capacity(comps.iter().map(|c| c.len() + 1).sum());
    for c in comps {
        s.push('/');
        s.push_str(c);
    }
    s
}

/// `parent` + `/` + `name`.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// True when `path` is `ancestor` or lies below it.
pub fn is_within(path: &str, ancestor: &str) -> bool {
    ancestor == "/"
        || path == ancestor
        || (path.starts_with(ancestor) && path.as_bytes().get(ancestor.len()) == Some(&b'/'))
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
        assert_eq!(components("/").unwrap(), Vec::<&str>::new());
        assert_eq!(components("/a/b").unwrap(), vec!["a", "b"]);
        assert_eq!(components("/a/b/").unwrap(), vec!["a", "b"]);
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
    }
}
