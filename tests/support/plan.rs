//! Query plans for the EXPLAIN tests: [`TestDb::explain`] and [`TestDb::explain_analyze`] read
//! MariaDB's and PostgreSQL's plans into one normalised [`PlanStep`] list.

use sqlx::Row;

use super::raw::{Bind, RawPool, bound_query, get_i64, get_str};
use super::{Backend, TestDb};

/// One step of a query plan, normalised across MariaDB and PostgreSQL.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanStep {
    /// MariaDB: the `type` column (`range`, `ref`, `ALL`, `index`, …). PostgreSQL: the node type
    /// (`Index Scan`, `Index Only Scan`, `Seq Scan`, `Limit`, `LockRows`, …).
    pub access: String,
    /// The table the step reads, when it reads one.
    pub table: Option<String>,
    /// The index used (MariaDB `key`; PostgreSQL `using …`).
    pub index: Option<String>,
    /// Estimated rows (MariaDB `rows`; PostgreSQL `rows=` of the estimate).
    pub rows: Option<f64>,
    /// Rows actually read per loop, from [`TestDb::explain_analyze`] (MariaDB `r_rows`;
    /// PostgreSQL `actual … rows=`); `None` from a plain [`TestDb::explain`].
    pub actual_rows: Option<f64>,
    /// The whole step as text (MariaDB: every column; PostgreSQL: the plan line and its detail lines).
    pub text: String,
}

impl TestDb {
    /// The plan of `sql` (with `binds`) on MariaDB (`EXPLAIN`) or PostgreSQL (`EXPLAIN`, text
    /// format, parsed into steps). Panics on SQLite.
    pub async fn explain(&self, sql: &str, binds: &[Bind]) -> Vec<PlanStep> {
        self.plan(sql, binds, false).await
    }

    /// Runs `sql` (it is executed!) and returns its plan with the rows actually read: MariaDB
    /// `ANALYZE <sql>`, PostgreSQL `EXPLAIN (ANALYZE) <sql>`. Panics on SQLite.
    pub async fn explain_analyze(&self, sql: &str, binds: &[Bind]) -> Vec<PlanStep> {
        self.plan(sql, binds, true).await
    }

    /// [`TestDb::explain`] (`analyze = false`) or [`TestDb::explain_analyze`].
    async fn plan(&self, sql: &str, binds: &[Bind], analyze: bool) -> Vec<PlanStep> {
        let explain = match (self.backend, analyze) {
            (_, false) => format!("EXPLAIN {sql}"),
            (Backend::Postgres, true) => format!("EXPLAIN (ANALYZE) {sql}"),
            (_, true) => format!("ANALYZE {sql}"),
        };
        match &self.pool {
            RawPool::MySql(p) => {
                let rows = bound_query::<sqlx::MySql>(&explain, binds)
                    .fetch_all(p)
                    .await
                    .unwrap_or_else(|e| panic!("{explain}: {e}"));
                rows.iter()
                    .map(|r| {
                        use sqlx::Column;
                        let text = r
                            .columns()
                            .iter()
                            .map(|c| {
                                let v = get_str::<sqlx::MySql>(r, c.name())
                                    .or_else(|| {
                                        get_i64::<sqlx::MySql>(r, c.name()).map(|i| i.to_string())
                                    })
                                    .or_else(|| {
                                        r.try_get::<Option<f64>, _>(c.name())
                                            .ok()
                                            .flatten()
                                            .map(|f| f.to_string())
                                    })
                                    .unwrap_or_else(|| "NULL".into());
                                format!("{}={v}", c.name())
                            })
                            .collect::<Vec<_>>()
                            .join(" ");
                        PlanStep {
                            access: get_str::<sqlx::MySql>(r, "type").unwrap_or_default(),
                            table: get_str::<sqlx::MySql>(r, "table"),
                            index: get_str::<sqlx::MySql>(r, "key"),
                            rows: get_i64::<sqlx::MySql>(r, "rows").map(|v| v as f64).or_else(
                                || get_str::<sqlx::MySql>(r, "rows").and_then(|s| s.parse().ok()),
                            ),
                            actual_rows: r
                                .try_get::<Option<f64>, _>("r_rows")
                                .ok()
                                .flatten()
                                .or_else(|| {
                                    get_str::<sqlx::MySql>(r, "r_rows").and_then(|s| s.parse().ok())
                                }),
                            text,
                        }
                    })
                    .collect()
            }
            RawPool::Postgres(p) => {
                let rows = bound_query::<sqlx::Postgres>(&explain, binds)
                    .fetch_all(p)
                    .await
                    .unwrap_or_else(|e| panic!("{explain}: {e}"));
                let lines: Vec<String> = rows
                    .iter()
                    .map(|r| r.try_get::<String, _>(0).expect("plan line"))
                    .collect();
                parse_pg_plan(&lines)
            }
            RawPool::Sqlite(_) => panic!("explain() is for MariaDB and PostgreSQL"),
        }
    }

    /// Refreshes the planner statistics of `table` (`ANALYZE TABLE` / `ANALYZE`).
    pub async fn analyze(&self, table: &str) {
        let sql = match self.backend {
            Backend::MySql => format!("ANALYZE TABLE {table}"),
            Backend::Postgres | Backend::Sqlite => format!("ANALYZE {table}"),
        };
        self.execute(&sql, &[]).await;
    }
}

/// Parses PostgreSQL's text `EXPLAIN` output into steps (one per `->` node plus the top node).
pub fn parse_pg_plan(lines: &[String]) -> Vec<PlanStep> {
    let mut steps: Vec<PlanStep> = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        let is_node = steps.is_empty() || trimmed.starts_with("->");
        if !is_node {
            if let Some(last) = steps.last_mut() {
                last.text.push('\n');
                last.text.push_str(trimmed);
            }
            continue;
        }
        let body = trimmed.trim_start_matches("->").trim_start();
        let head = body.split("  (").next().unwrap_or(body);
        let (head_no_on, table) = match head.split_once(" on ") {
            Some((h, t)) => (
                h,
                Some(t.split_whitespace().next().unwrap_or(t).to_string()),
            ),
            None => (head, None),
        };
        let (access, index) = match head_no_on.split_once(" using ") {
            Some((a, i)) => (a.to_string(), Some(i.trim().to_string())),
            None => (head_no_on.trim().to_string(), None),
        };
        // `Bitmap Index Scan on idx` names the index after "on".
        let (index, table) = if access == "Bitmap Index Scan" {
            (table, None)
        } else {
            (index, table)
        };
        let number_after = |text: &str, key: &str| -> Option<f64> {
            text.split(key)
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit() && c != '.').next())
                .and_then(|s| s.parse().ok())
        };
        let rows = number_after(body, "rows=");
        let actual_rows = body
            .split("(actual ")
            .nth(1)
            .and_then(|s| number_after(s, "rows="));
        steps.push(PlanStep {
            access,
            table,
            index,
            rows,
            actual_rows,
            text: body.to_string(),
        });
    }
    steps
}

/// The backlog the plan tests (`tests/explain.rs`, `tests/sqlite_plans.rs`) explain their
/// statements on: delivered history beside a few live rows of each kind
/// ([`super::RawInsert::live_rows_of_each_kind`]).
pub mod backlog {
    /// Delivered rows of history.
    pub const HISTORY: i64 = 200_000;
    /// Rooms the history is spread over (the live rows sit in some of them): 2,000 delivered rows
    /// per room, so a room probe that reads history estimates far more rows than it returns.
    pub const ROOMS: i64 = 100;
    /// Live rows of each kind.
    pub const LIVE: i64 = 20;
    /// Tenant.
    pub const APP: &str = "app_a";
    /// The claim's `now_ms`: after every due retry and expired lease, before the others.
    pub const NOW: i64 = 5_000_000;
    /// "Never" (not-yet-due retries, live leases).
    pub const LATER: i64 = 9_000_000_000_000;
}
