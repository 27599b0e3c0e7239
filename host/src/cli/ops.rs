//! The store operations of the command line: `migrate`, `enqueue`, `run`, `status`,
//! `failed list`, `requeue`.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{EnqueueArgs, FilterArgs, RequeueArgs};
use outboxd::config::Config;
use outboxd::dead_letters::{self, DeadLetterAction};
use outboxd::metrics::Metrics;
use outboxd::progress::RowsProgress;
use outboxd::record::{Record, now_ms};
use outboxd::reload::ConfigSource;
use outboxd::retention::Retention;
use outboxd::service::Service;
use outboxd::store::{
    self, CountsParams, FailedFilter, ListFailedParams, OutboxStore, RequeueParams,
};
use outboxd::wake::{self, Wake};
use outboxd::worker::RunMode;

/// `outboxd migrate [--partitions N]`: the schema, its indexes and the partition tables; with
/// `--partitions`, the table's partition count changed to N once the migrations are applied.
pub async fn migrate(config: &Config, partitions: Option<u32>) -> Result<()> {
    if let Some(partitions) = partitions {
        store::check_partition_count(partitions)?;
    }
    let store = connect(config).await?;
    let table = &config.database.table;
    let applied = store.migrate().await?;
    if applied.is_empty() {
        println!("{table} is up to date");
    } else {
        println!("applied migrations {applied:?} to {table}");
    }
    let outcome = match partitions {
        Some(partitions) => store.repartition(partitions).await.map(Some),
        None => Ok(None),
    };
    let count = store.partitions();
    store.close().await;
    match outcome? {
        Some(change) if change.from != change.to => println!(
            "{table} has {} partitions per tenant now (was {}); start the hosts",
            change.to, change.from
        ),
        _ => println!("{table} has {count} partitions per tenant"),
    }
    Ok(())
}

/// `outboxd status [--json] [--app APP]`.
pub async fn status(config: &Config, json: bool, app_code: Option<String>) -> Result<()> {
    let store = connect(config).await?;
    let counts = store
        .counts(&CountsParams {
            app_code,
            now_ms: now_ms(),
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string(&counts)?);
    } else {
        println!(
            "pending {}  delivering {}  retryable {}  failed {}  delivered {}  oldest pending age {}",
            counts.pending,
            counts.delivering,
            counts.retryable,
            counts.failed,
            counts.delivered,
            counts
                .oldest_pending_age_ms
                .map(
                    |ms| humantime::format_duration(std::time::Duration::from_millis(
                        ms.max(0) as u64
                    ))
                    .to_string()
                )
                .unwrap_or_else(|| "-".into())
        );
    }
    store.close().await;
    Ok(())
}

/// `outboxd failed list`.
pub async fn list_failed(
    config: &Config,
    json: bool,
    limit: u32,
    filter: &FilterArgs,
) -> Result<()> {
    let store = connect(config).await?;
    let rows = store
        .list_failed(&ListFailedParams {
            filter: filter.to_filter()?,
            limit,
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else if rows.is_empty() {
        println!("no failed rows");
    } else {
        for row in &rows {
            println!(
                "{}\t{}\t{}\troom={}\tretries={}\t{}",
                row.app_code,
                row.event_id,
                row.event_type,
                row.room_id,
                row.retry_count,
                row.last_error.as_deref().unwrap_or("")
            );
        }
    }
    store.close().await;
    Ok(())
}

/// `outboxd requeue`: needs a filter or `--all`; moves the rows in chunks with a progress bar.
pub async fn requeue(config: &Config, args: RequeueArgs) -> Result<()> {
    let filter = args.filter.to_filter()?;
    if filter.is_empty() && !args.all {
        bail!(
            "requeue needs a filter (--event-id, --type, --room, --since, --until, --error, --app) or --all"
        );
    }
    let store = connect(config).await?;
    let now_ms = now_ms();
    let count = |filter: FailedFilter| RequeueParams {
        filter,
        dry_run: true,
        now_ms,
        limit: None,
    };
    let total = store.requeue(&count(filter.clone())).await?;
    if args.dry_run {
        println!("{total} failed rows would be requeued");
        store.close().await;
        return Ok(());
    }
    // Chunks of `--chunk` rows, one short transaction each, tenant by tenant, then the rest
    // (outboxd::dead_letters).
    let mut progress = RowsProgress::new("requeue", total);
    dead_letters::run_in_chunks(
        store.as_ref(),
        DeadLetterAction::Requeue,
        &filter,
        &config.worker.app_codes,
        args.chunk,
        now_ms,
        |moved| progress.add(moved),
    )
    .await?;
    let moved = progress.done();
    progress.finish();
    println!("requeued {moved} failed rows");
    store.close().await;
    Ok(())
}

/// Connects to the configured database.
async fn connect(config: &Config) -> Result<Arc<dyn OutboxStore>> {
    store::connect(&config.connect_options())
        .await
        .with_context(|| {
            format!(
                "cannot open database {}",
                store::redact_url(&config.database.url)
            )
        })
}

/// `outboxd enqueue`: sample events, in chunks of 1000.
pub async fn enqueue(config: &Config, args: EnqueueArgs) -> Result<()> {
    serde_json::from_str::<serde_json::Value>(&args.body_json)
        .context("--body-json is not valid JSON")?;
    let now = SystemTime::now();
    let records: Vec<Record> = (0..args.count)
        .map(|i| {
            let mut record = Record::build(
                &args.room,
                &args.event_type,
                args.room_version + i64::from(i),
                now,
                &(),
            )
            .with_app_code(&args.app_code);
            record.envelope.body = args.body_json.as_bytes().to_vec();
            record
        })
        .collect();
    let store = connect(config).await?;
    let mut inserted = 0;
    for chunk in records.chunks(1000) {
        inserted += store.enqueue(chunk).await?;
    }
    println!(
        "enqueued {inserted} events (room {}, type {})",
        args.room, args.event_type
    );
    store.close().await;
    Ok(())
}

/// `outboxd run [--drain]`: the service (admin listener, retention, sinks, worker) until a
/// signal (or drained); `source` re-reads the config on a hot reload.
pub async fn run(config: &Config, drain: bool, source: ConfigSource) -> Result<()> {
    config.check_deliverable()?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let store = connect(config).await?;
    let service = Service::bind(config.clone(), store.clone())
        .await?
        .with_reload(source);
    let shutdown = CancellationToken::new();
    let mode = if drain {
        RunMode::Drain
    } else {
        RunMode::Forever
    };
    let wake = Wake::new();
    // A draining run stops at the first empty claim: a feed would wake nothing.
    let feed = match mode {
        RunMode::Forever => wake::start_commit_feed_with(
            &config.database.url,
            &config.database.table,
            config.worker.wake,
            &wake,
            shutdown.child_token(),
        )
        .await
        .context("cannot start the commit feed")?,
        RunMode::Drain => None,
    };
    let service = service.with_wake(wake);
    tokio::spawn(super::signals::stop_on_signal(shutdown.clone()));
    info!(node_id = %config.worker.node_id, database = %store::redact_url(&config.database.url),
        app_codes = ?config.worker.app_codes, admin = ?service.admin_addr(), "outboxd running");
    let result = service.run(mode, shutdown.clone()).await;
    shutdown.cancel();
    if let Some(feed) = feed {
        let _ = feed.await;
    }
    store.close().await;
    let stats = result?;
    info!(
        claimed = stats.claimed,
        delivered = stats.delivered,
        retried = stats.retried,
        deferred = stats.deferred,
        failed = stats.failed + stats.rejected,
        stale = stats.stale,
        "outboxd stopped"
    );
    Ok(())
}

/// `outboxd purge [--dry-run] [--app A]`: one retention pass (or its count).
pub async fn purge(config: &Config, dry_run: bool, app_code: Option<String>) -> Result<()> {
    let retention = &config.retention;
    if !retention.enabled() {
        bail!(
            "retention is off (retention.delivered and retention.failed are both \"off\"): nothing to purge"
        );
    }
    let store = connect(config).await?;
    let cleanup = Retention {
        store: store.clone(),
        app_codes: app_code.map_or_else(|| config.worker.app_codes.clone(), |app| vec![app]),
        config: retention.clone(),
        metrics: Metrics::default(),
    };
    let age = |age: Option<std::time::Duration>| {
        age.map_or_else(
            || "kept (off)".to_string(),
            |age| format!("older than {}", humantime::format_duration(age)),
        )
    };
    let totals = if dry_run {
        cleanup.dry_run().await
    } else {
        cleanup.pass(&CancellationToken::new()).await
    };
    store.close().await;
    let totals = totals?;
    let verb = if dry_run { "would delete" } else { "deleted" };
    println!(
        "{verb} {} delivered rows ({}) and {} failed rows ({}) of {}",
        totals.delivered,
        age(retention.delivered),
        totals.failed,
        age(retention.failed),
        cleanup.app_codes.join(", ")
    );
    Ok(())
}

impl FilterArgs {
    /// The store filter these flags describe.
    pub fn to_filter(&self) -> Result<FailedFilter> {
        Ok(FailedFilter {
            app_code: self.app_code.clone(),
            event_ids: self.event_ids.clone(),
            event_type: self.event_type.clone(),
            room_id: self.room_id.clone(),
            since_ms: self
                .since
                .as_deref()
                .map(|t| parse_time(t).context("--since"))
                .transpose()?,
            until_ms: self
                .until
                .as_deref()
                .map(|t| parse_time(t).context("--until"))
                .transpose()?,
            last_error: self.last_error.clone(),
        })
    }
}

/// RFC 3339 (`2026-11-29T10:00:00Z`) or Unix milliseconds.
fn parse_time(text: &str) -> Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let time = humantime::parse_rfc3339_weak(text).with_context(|| {
        format!("{text:?} is neither RFC 3339 (2026-11-29T10:00:00Z) nor Unix milliseconds")
    })?;
    Ok(outboxd::record::system_time_ms(time))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_time("1970-01-01T00:00:01Z").unwrap(), 1_000);
        assert!(parse_time("yesterday").is_err());
    }
}
