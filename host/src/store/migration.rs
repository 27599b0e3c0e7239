//! One embedded schema migration ([`Migration`]): its version, name and SQL template; each
//! backend lists its own (`store/<backend>/dialect.rs`), `migrate` applies them
//! ([`super::schema`]).

use super::{MigrateOptions, TableName};

/// One embedded schema migration (`migrations/<backend>/NNNN_name.sql`), written with the
/// placeholder `{{table}}` for the outbox table.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version recorded in `outboxd_migrations`.
    pub version: i64,
    /// File name without `.sql`.
    pub name: &'static str,
    template: &'static str,
    /// Whether the migration only drops the room index (taking it out of the base schema): it
    /// is skipped, and recorded as applied all the same, when `migrate` runs with the room index
    /// ([`MigrateOptions::room_index`]), so a per-room table keeps its index instead of dropping
    /// and rebuilding it.
    pub drops_room_index: bool,
}

impl Migration {
    /// Migration `version` named `name` (the file name without `.sql`), its SQL `template`
    /// naming the outbox table `{{table}}`.
    pub(crate) const fn new(version: i64, name: &'static str, template: &'static str) -> Migration {
        Migration {
            version,
            name,
            template,
            drops_room_index: false,
        }
    }

    /// This migration, marked as one that only drops the room index
    /// ([`Migration::drops_room_index`]).
    pub(crate) const fn dropping_room_index(self) -> Migration {
        Migration {
            drops_room_index: true,
            ..self
        }
    }

    /// Whether `migrate` with `options` runs this migration's SQL; otherwise it only records it.
    pub fn runs_with(&self, options: &MigrateOptions) -> bool {
        !(self.drops_room_index && options.room_index)
    }

    /// The migration's SQL for `table`.
    pub fn sql(&self, table: &TableName) -> String {
        self.template.replace("{{table}}", table.as_str())
    }
}
