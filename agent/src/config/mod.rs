//! The safe fail2ban config editor: reads the effective configuration as fail2ban sees it,
//! writes jail overrides and filters only by logical name and only after fail2ban has
//! validated them, reloads, checks health and rolls back on any failure; tests filters with
//! `fail2ban-regex`.

pub mod error;
pub mod files;
pub mod ini;
pub mod names;
pub mod reader;
pub mod version;

pub use error::ConfigError;
pub use files::{EditableFile, VersionedFile};
pub use names::{FilterName, JailName};
pub use reader::{
    ConfigReader, EffectiveConfig, FilterFiles, FilterRef, JailInfo, JailView, Origin, Setting,
};
pub use version::Version;
