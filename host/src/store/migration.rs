//! One embedded schema migration ([`Migration`]): its version, name and SQL template; each
//! backend lists its own (`store/<backend>/dialect.rs`), `migrate` applies them
//! ([`super::schema`]).

use super::TableName;

/// One embedded schema migration (`migrations/<backend>/NNNN_name.sql`), written with the
/// placeholder `{{table}}` for the outbox table.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version recorded in `outboxd_migrations`.
    pub version: i64,
    /// File name without `.sql`.
    pub name: &'static str,
    template: &'static str,
    /// Whether `migrate` runs it outside a transaction, one statement at a time, after the
    /// transaction of the others commits (for statements a transaction refuses, such as
    /// PostgreSQL's `CREATE INDEX CONCURRENTLY`).
    pub outside_transaction: bool,
}

impl Migration {
    /// Migration `version` named `name` (the file name without `.sql`), its SQL `template`
    /// naming the outbox table `{{table}}`.
    pub(crate) const fn new(version: i64, name: &'static str, template: &'static str) -> Migration {
        Migration {
            version,
            name,
            template,
            outside_transaction: false,
        }
    }

    /// This migration, marked to run outside a transaction ([`Migration::outside_transaction`]):
    /// for statements a transaction refuses, such as PostgreSQL's `CREATE INDEX CONCURRENTLY`,
    /// which builds an index while producers keep writing. `migrate` runs such migrations after
    /// the others, in version order, each statement in autocommit under the dialect's session
    /// lock, and records one only after its last statement; so its statements must be safe to
    /// run again from the first after an interruption. A backend lists them last.
    pub(crate) const fn outside_transaction(self) -> Migration {
        Migration {
            outside_transaction: true,
            ..self
        }
    }

    /// The migration's SQL for `table`.
    pub fn sql(&self, table: &TableName) -> String {
        self.template.replace("{{table}}", table.as_str())
    }

    /// The migration's statements for `table`, one by one, without comments: the file's text
    /// split after each line that ends with `;`. For migrations run outside a transaction, whose
    /// statements the database must receive one at a time (ours have no `;` inside a statement's
    /// line end, such as in a function body).
    pub fn statements(&self, table: &TableName) -> Vec<String> {
        let mut statements = Vec::new();
        let mut current = String::new();
        for line in self.sql(table).lines() {
            let line = line.trim_end();
            if line.trim_start().starts_with("--") || line.is_empty() {
                continue;
            }
            if !current.is_empty() {
                current.push('\n');
            }
            if let Some(last) = line.strip_suffix(';') {
                current.push_str(last);
                statements.push(std::mem::take(&mut current));
            } else {
                current.push_str(line);
            }
        }
        if !current.trim().is_empty() {
            statements.push(current);
        }
        statements
    }
}

/// The embedded migration `migrations/<backend>/<name>.sql` as version `version`:
/// `migration!("sqlite", 1, "0001_room_outbox")`.
macro_rules! migration {
    ($backend:literal, $version:literal, $name:literal) => {
        $crate::store::migration::Migration::new(
            $version,
            $name,
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../migrations/",
                $backend,
                "/",
                $name,
                ".sql"
            )),
        )
    };
}
pub(crate) use migration;
