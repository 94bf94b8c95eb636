//! Rust errors to Python exceptions: the classes live in
//! `treelog._errors` (they inherit from both `treelog.Error` and the
//! built-in `OSError` subclass a filesystem user expects).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use treelog_proto::error::Error;

static MAKE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The Python exception for `e`, with its `kind`, its errno and, where the
/// error carries them, `leader` (`NotLeader`), `requested` and
/// `first_available` (`Compacted`).
pub(crate) fn to_py(py: Python<'_>, e: &Error) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let make = MAKE.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("treelog._errors")?.getattr("_make")?.unbind())
        })?;
        let exc = make.bind(py).call1((e.kind().as_str(), e.to_string()))?;
        match e {
            Error::NotLeader { leader } | Error::Lagging { leader, .. } => {
                exc.setattr("leader", leader.clone())?;
            }
            Error::Compacted {
                requested,
                first_available,
            } => {
                exc.setattr("requested", *requested)?;
                exc.setattr("first_available", *first_available)?;
            }
            _ => {}
        }
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|x| x)
}

/// `to_py`, taking the GIL (for futures finishing on the runtime).
pub(crate) fn err(e: Error) -> PyErr {
    Python::attach(|py| to_py(py, &e))
}

pub(crate) fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
