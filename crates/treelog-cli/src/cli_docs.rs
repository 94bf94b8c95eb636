//! `treelog completions SHELL` and `treelog man`: generated from the same
//! clap definition that parses the command line (src/config.rs's, with the
//! environment variables), so they cannot drift from it.

use std::io::Write;

use crate::error::Result;

pub(crate) fn completions(shell: clap_complete::Shell) -> Result<u8> {
    let mut cmd = crate::config::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "treelog", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(0)
}

pub(crate) fn man() -> Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(crate::config::command()).render(&mut out)?;
    std::io::stdout().write_all(&out)?;
    Ok(0)
}
