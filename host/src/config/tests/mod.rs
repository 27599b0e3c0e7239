//! Unit tests of config loading: defaults, file, environment, and the errors naming the key;
//! `sinks.rs`: the sinks, routes and their limits.

use super::*;

mod docs;
mod sinks;

fn load_str(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboxd.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(
        Some(&path),
        env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

#[test]
fn defaults_are_valid() {
    let config = Config::defaults();
    assert_eq!(config.database.url, "sqlite://outboxd.db");
    assert_eq!(config.database.table.as_str(), "room_outbox");
    assert_eq!(config.worker.batch_size, DEFAULT_BATCH_SIZE);
    assert!(config.worker.batch_size_is_default);
    assert_eq!(config.worker.app_codes, vec!["default"]);
    assert_eq!(config.retry.max_attempts, 20);
}

#[test]
fn design_example_loads() {
    let config = load_str(
        r#"
        [database]
        url = "mysql://root@127.0.0.1:3306/app"
        table = "room_outbox"
        [worker]
        app_codes = ["default", "ktv"]
        batch_size = 200
        poll_interval = "250ms"
        lease = "30s"
        ordering = "per-room"
        [retry]
        strategy = "schedule"
        delays = ["1s", "5s", "1m"]
        max_attempts = 4
        [[route]]
        event_type = "RoomGift*"
        sink = "log"
        [[sink]]
        name = "log"
        plugin = "plugins/log.wasm"
        config = { format = "json" }
        limits = { publish_timeout = "3s", memory = "64MiB" }
        "#,
        &[],
    )
    .unwrap();
    assert_eq!(config.worker.ordering, DeliveryOrder::PerRoom);
    assert_eq!(config.worker.poll_interval, Duration::from_millis(250));
    assert_eq!(config.retry.max_attempts, 4);
    assert_eq!(
        config.retry.strategy,
        Strategy::Schedule {
            delays: vec![
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::from_secs(60)
            ]
        }
    );
    let sink = &config.publishing.sinks()[0];
    assert_eq!(sink.limits().memory, ByteSize(64 << 20));
    assert!(sink.plugin().ends_with("plugins/log.wasm"));
    assert!(sink.plugin().is_absolute());
}

#[test]
fn unknown_key_is_named() {
    let err = load_str("[worker]\nbatch_sise = 3\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("batch_sise"), "{err}");
}

#[test]
fn bad_values_are_named() {
    let cases = [
        ("[worker]\nbatch_size = 0\n", "worker.batch_size"),
        (
            "[worker]\nlease = \"1s\"\npublish_timeout = \"5s\"\n",
            "worker.lease",
        ),
        ("[database]\ntable = \"x; drop\"\n", "database.table"),
        ("[database]\nurl = \"redis://x\"\n", "database.url"),
        ("[retry]\nstrategy = \"schedule\"\n", "retry.delays"),
        ("[retry]\nmax_attempts = 0\n", "retry.max_attempts"),
        (
            "[[route]]\nevent_type = \"*\"\nsink = \"nope\"\n",
            "route[0].sink",
        ),
    ];
    for (text, key) in cases {
        let err = load_str(text, &[]).unwrap_err().to_string();
        assert!(err.contains(key), "{text:?} → {err}");
    }
    let err = load_str("[worker]\npoll_interval = \"soon\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("poll_interval"), "{err}");
    let err = load_str("[retry]\nstrategy = \"linear\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("linear"), "{err}");
}

#[test]
fn deadlines_must_nest_with_margins() {
    let sink = |limits: &str, config: &str| {
        format!(
            "[[sink]]\nname = \"s\"\nplugin = \"s.wasm\"\nlimits = {{ {limits} }}\nconfig = {{ {config} }}\n"
        )
    };
    // Defaults nest: a plugin's 10s timeout < sink 15s < worker 20s < lease 30s.
    let config = load_str(&sink("", "timeout_ms = \"10000\""), &[]).unwrap();
    assert_eq!(
        config.publishing.sinks()[0].limits().publish_timeout,
        Duration::from_secs(15)
    );
    assert_eq!(config.worker.publish_timeout, Duration::from_secs(20));
    assert_eq!(config.worker.lease, Duration::from_secs(30));
    let cases = [
        (
            sink("publish_timeout = \"20s\"", ""),
            "sink[0].limits.publish_timeout",
            "worker.publish_timeout (20s)",
        ),
        (
            sink("", "timeout_ms = \"15000\""),
            "sink[0].config.timeout_ms",
            "sink[0].limits.publish_timeout (15s)",
        ),
        (
            sink("max_batch_size = 100", ""),
            "sink[0].limits.publish_timeout",
            "× 5 calls",
        ),
        (
            "[worker]\nlease = \"20s\"\n".to_string(),
            "worker.lease",
            "worker.publish_timeout (20s) + 1s",
        ),
    ];
    for (text, key, detail) in cases {
        let err = load_str(&text, &[]).unwrap_err().to_string();
        assert!(
            err.contains(key) && err.contains(detail),
            "{text:?} → {err}"
        );
    }
}

#[test]
fn environment_overrides_file() {
    let config = load_str(
        "[worker]\nbatch_size = 10\n",
        &[
            ("OUTBOXD_WORKER_BATCH_SIZE", "42"),
            ("OUTBOXD_WORKER_APP_CODES", "live, ktv"),
            ("OUTBOXD_DATABASE_URL", "postgres://u@h/db"),
            ("OUTBOXD_RETRY_STRATEGY", "fixed_interval"),
            ("OUTBOXD_RETRY_INTERVAL", "2s"),
            ("OUTBOXD_TEST_MYSQL_URL", "ignored"),
        ],
    )
    .unwrap();
    assert_eq!(config.worker.batch_size, 42);
    assert_eq!(config.worker.app_codes, vec!["live", "ktv"]);
    assert_eq!(config.database.url, "postgres://u@h/db");
    assert_eq!(
        config.retry.strategy,
        Strategy::FixedInterval {
            interval: Duration::from_secs(2)
        }
    );
}

#[test]
fn unknown_environment_key_is_named() {
    let err = load_str("", &[("OUTBOXD_WORKER_BATCHSIZE", "1")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("OUTBOXD_WORKER_BATCHSIZE") && err.contains("batchsize"),
        "{err}"
    );
}

#[test]
fn byte_sizes_parse() {
    assert_eq!(ByteSize::parse("64MiB").unwrap(), ByteSize(64 << 20));
    assert_eq!(ByteSize::parse("10 MB").unwrap(), ByteSize(10_000_000));
    assert_eq!(ByteSize::parse("4096").unwrap(), ByteSize(4096));
    assert!(ByteSize::parse("12 parsecs").is_err());
}

#[test]
fn worker_mode_is_gone_but_partitioned_is_accepted() {
    let pg = "[database]\nurl = \"postgres://postgres@127.0.0.1/test\"\n";
    assert!(load_str(&format!("{pg}[worker]\nmode = \"partitioned\"\n"), &[]).is_ok());
    for old in ["leased", "held"] {
        let err = load_str(&format!("{pg}[worker]\nmode = \"{old}\"\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid config key `worker.mode`")
                && err.contains(old)
                && err.contains("partitions.md"),
            "{err}"
        );
    }
    let env = load_str(pg, &[("OUTBOXD_WORKER_MODE", "held")])
        .unwrap_err()
        .to_string();
    assert!(env.contains("`worker.mode`"), "{env}");
}

#[test]
fn the_admin_listen_address_knows_whether_it_was_set() {
    let defaults = Config::defaults();
    assert!(!defaults.admin.listen_is_explicit);
    assert_eq!(
        defaults.admin.listen.unwrap().to_string(),
        DEFAULT_ADMIN_LISTEN
    );
    let set = load_str("[admin]\nlisten = \"127.0.0.1:9464\"\n", &[]).unwrap();
    assert!(set.admin.listen_is_explicit);
    let off = load_str("[admin]\nlisten = \"\"\n", &[]).unwrap();
    assert_eq!(off.admin.listen, None);
}

#[test]
fn wake_and_idle_probe_default_by_database_and_are_checked() {
    let mysql = "[database]\nurl = \"mysql://root@127.0.0.1:3306/app\"\n";
    let config = load_str(mysql, &[]).unwrap();
    assert_eq!(config.worker.wake, WakeMode::Auto);
    assert_eq!(config.worker.idle_probe, DEFAULT_IDLE_PROBE);
    assert_eq!(config.worker_options().idle_probe, DEFAULT_IDLE_PROBE);
    // A poll interval below the default bounds it.
    let short = load_str(&format!("{mysql}[worker]\npoll_interval = \"20ms\"\n"), &[]).unwrap();
    assert_eq!(short.worker.idle_probe, Duration::from_millis(20));
    // Databases with a commit feed back off to the poll interval, as before.
    let sqlite = Config::defaults();
    assert_eq!(sqlite.worker.idle_probe, sqlite.worker.poll_interval);
    let set = load_str(
        &format!("{mysql}[worker]\nwake = \"probe\"\nidle_probe = \"10ms\"\n"),
        &[],
    )
    .unwrap();
    assert_eq!(set.worker.wake, WakeMode::Probe);
    assert_eq!(set.worker.idle_probe, Duration::from_millis(10));
    let env = load_str(
        mysql,
        &[
            ("OUTBOXD_WORKER_WAKE", "binlog"),
            ("OUTBOXD_WORKER_IDLE_PROBE", "20ms"),
        ],
    )
    .unwrap();
    assert_eq!(env.worker.wake, WakeMode::Binlog);
    assert_eq!(env.worker.idle_probe, Duration::from_millis(20));

    for (text, key) in [
        (
            format!("{mysql}[worker]\nidle_probe = \"0s\"\n"),
            "worker.idle_probe",
        ),
        (
            format!("{mysql}[worker]\npoll_interval = \"1s\"\nidle_probe = \"2s\"\n"),
            "worker.idle_probe",
        ),
        (format!("{mysql}[worker]\nwake = \"sometimes\"\n"), "wake"),
        ("[worker]\nwake = \"binlog\"\n".to_string(), "worker.wake"),
    ] {
        let err = load_str(&text, &[]).unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}
