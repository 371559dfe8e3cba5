//! What the bench binaries (`banhub-bench`, `fleet`, `control`) share: the measuring helpers.

pub mod measure;
