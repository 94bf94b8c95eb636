//! `treelog admin credential`: the credentials file of `serve
//! --credentials`.

use crate::args::CredentialCmd;
use crate::error::Result;
use crate::output::{outln, Out};

pub(crate) fn run(out: &Out, cmd: &CredentialCmd) -> Result<u8> {
    match cmd {
        CredentialCmd::Add { file, name, role } => {
            let secret = crate::server::add_credential(file, name, *role)?;
            // Shown this once: the file keeps only its hash.
            if out.json {
                out.print_json(&serde_json::json!({
                    "ok": true, "name": name, "role": role.as_str(), "secret": secret,
                }))?;
            } else {
                outln!(out, "{secret}")?;
            }
            Ok(0)
        }
    }
}
