//! The user a request acts for (`--enforce-permissions`, docs/SECURITY.md
//! "Permissions"): asserted by a credential allowed to act for users (a
//! mount, a gateway), as HDFS proxy users are.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The most groups a caller may name (Linux's `NGROUPS_MAX` is 65,536; a
/// request stays small and its check cheap).
pub const MAX_CALLER_GROUPS: usize = 256;
/// The longest user or group name a caller may give (as the owner and
/// group dictionaries hold them).
pub const MAX_CALLER_NAME: usize = 255;
/// The user every permission check lets through (as uid 0 on Linux).
pub const SUPERUSER: &str = "root";

/// A user and the groups it is a member of (the first is its primary
/// group: a new entry's group unless its parent directory is setgid).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
}

impl Caller {
    pub fn new(user: impl Into<String>, groups: Vec<String>) -> Caller {
        Caller {
            user: user.into(),
            groups,
        }
    }

    /// Whether permission checks let this caller through.
    pub fn is_superuser(&self) -> bool {
        self.user == SUPERUSER
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The group a new entry takes (outside a setgid directory): the
    /// primary group, or none.
    pub fn primary_group(&self) -> &str {
        self.groups.first().map_or("", String::as_str)
    }

    /// Refuses a caller that is not a user name and bounded groups.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidArgument(format!("caller: {why}")));
        if self.user.is_empty() {
            return bad("the user name is empty".into());
        }
        if self.groups.len() > MAX_CALLER_GROUPS {
            return bad(format!(
                "{} groups; at most {MAX_CALLER_GROUPS} are allowed",
                self.groups.len()
            ));
        }
        for n in std::iter::once(&self.user).chain(&self.groups) {
            if n.len() > MAX_CALLER_NAME || n.contains('\0') {
                return bad(format!(
                    "{:?} is not a name (at most {MAX_CALLER_NAME} bytes, no NUL)",
                    n.chars().take(64).collect::<String>()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let ok = Caller::new("alice", vec!["staff".into(), "wheel".into()]);
        ok.validate().unwrap();
        assert!(!ok.is_superuser());
        assert!(ok.in_group("wheel") && !ok.in_group("root"));
        assert_eq!(ok.primary_group(), "staff");
        assert!(Caller::new("root", vec![]).is_superuser());
        assert_eq!(Caller::new("root", vec![]).primary_group(), "");
        for bad in [
            Caller::new("", vec![]),
            Caller::new("a\0b", vec![]),
            Caller::new("a", vec!["x".repeat(256)]),
            Caller::new("a", vec!["g".into(); MAX_CALLER_GROUPS + 1]),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
