//! fail2ban's files on this host (its configuration directory) and the safe editor of them: reads
//! the effective configuration as fail2ban sees it, writes jail overrides and filters only by
//! logical name and only after fail2ban has validated them, reloads, checks health and rolls back
//! on any failure; tests filters with `fail2ban-regex`.
//!
//! Entry points: [`ConfigReader`] (blocking reads), [`ConfigEditor`] (validated writes, jail
//! enable/disable, filter tests), [`filter_test::test_filter`], [`preview::run`] (a filter over
//! the recent end of a jail's own log).

pub mod content;
pub mod create;
mod dump;
pub mod editor;
pub mod error;
pub mod files;
pub mod filter_test;
pub mod ini;
pub mod local_files;
pub mod names;
pub mod pending;
pub mod policy;
pub mod preview;
pub mod preview_count;
pub mod preview_logs;
pub mod reader;
pub mod running;
mod staging;
pub mod tools;
pub mod version;

pub use editor::{
    AgentEdit, AgentEditReport, AgentWrite, ConfigEditor, EditError, EditReport, EditTimings,
    EditorSettings, FileChange, ReloadScope, RollbackReport, SetFile, Stage,
};
pub use error::ConfigError;
pub use files::{AgentFile, EditableFile, VersionedFile};
pub use filter_test::{
    FilterSource, FilterTestError, FilterTestReport, LineCounts, MatchedLine, RegexHits,
};
pub use names::{FilterName, JailName};
pub use reader::{
    ConfigReader, EffectiveConfig, FilterFiles, FilterRef, JailInfo, JailView, Origin, Setting,
};
pub use staging::Backup;
pub use tools::{Fail2banTools, ToolError};
pub use version::Version;
