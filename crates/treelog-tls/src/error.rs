//! The crate's errors: each names the file or setting at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Pem { path: PathBuf, why: String },
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("certificates: {0}")]
    Certs(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<rustls::Error> for Error {
    fn from(e: rustls::Error) -> Error {
        Error::Config(e.to_string())
    }
}
