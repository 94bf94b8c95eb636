//! The namespace as a FUSE filesystem.
