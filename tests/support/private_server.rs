//! A database server private to one test: its own data dir under a temp dir, its own free port
//! and socket, its own temporary files, never the shared servers. PostgreSQL 15 (`initdb` + `postgres`) or MariaDB
//! (`mariadb-install-db` + `mariadbd`, optionally writing a ROW-format binlog). Killed (and its
//! files removed) when the guard drops, also when the test panics.
//!
//! Without the server binaries [`PrivateServer::start`] prints `SKIPPED …` and returns `None`;
//! under `CI` (any non-empty value) it panics instead, so CI never passes by skipping. The
//! newest installed PostgreSQL is used; `OUTBOXD_CHAOS_PG_BIN` overrides its binaries' folder.
//!
//! Shared by the tests (through `support`) and `bench_modes`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The database every private server has (MariaDB: created at start; PostgreSQL: `postgres`).
pub const MARIADB_DATABASE: &str = "outbox";

/// True when running in CI (`CI` set to anything but empty).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty())
}

/// The newest installed PostgreSQL's binaries (`/usr/lib/postgresql/<version>/bin`, Debian's
/// layout), unless `OUTBOXD_CHAOS_PG_BIN` names a folder.
fn postgres_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("OUTBOXD_CHAOS_PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    newest.map_or_else(
        || PathBuf::from("/usr/lib/postgresql/15/bin"),
        |(_, bin)| bin,
    )
}

/// Prints why the test cannot run; panics instead under `CI=true`.
fn skip(why: &str) {
    assert!(
        !in_ci(),
        "a private database server cannot start under CI=true: {why}"
    );
    eprintln!("SKIPPED (no private database server): {why}");
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().unwrap().port()
}

pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Which private server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

/// A database server private to one test: own data dir, own port. Stopped (and its files
/// removed) when dropped.
pub struct PrivateServer {
    kind: Kind,
    dir: tempfile::TempDir,
    /// The server's TCP port on 127.0.0.1.
    pub port: u16,
    child: Option<Child>,
    /// PostgreSQL binaries' folder.
    pg_bin: PathBuf,
    /// MariaDB: write a ROW-format binary log (`--log-bin`), else `--skip-log-bin`.
    log_bin: bool,
    /// The buffer pool (MariaDB) and shared buffers (PostgreSQL) of a server started
    /// [`PrivateServer::large`]; otherwise MariaDB's is 64 MiB and PostgreSQL's its default.
    memory: Option<&'static str>,
}

impl PrivateServer {
    /// Initializes and starts a server, or `None` (after [`skip`]) when its binaries are missing.
    pub async fn start(kind: Kind) -> Option<PrivateServer> {
        PrivateServer::start_with(kind, false).await
    }

    /// [`PrivateServer::start`] with a buffer pool (MariaDB) / shared buffers (PostgreSQL) of
    /// 1 GiB, for a test of a million rows whose table must fit in memory, as in production.
    pub async fn large(kind: Kind) -> Option<PrivateServer> {
        PrivateServer::start_full(kind, false, Some("1GB")).await
    }

    /// [`PrivateServer::start`]; MariaDB with a ROW-format binary log when `log_bin`.
    pub async fn start_with(kind: Kind, log_bin: bool) -> Option<PrivateServer> {
        PrivateServer::start_full(kind, log_bin, None).await
    }

    async fn start_full(
        kind: Kind,
        log_bin: bool,
        memory: Option<&'static str>,
    ) -> Option<PrivateServer> {
        let pg_bin = postgres_bin();
        let needed: Vec<PathBuf> = match kind {
            Kind::Postgres => vec![pg_bin.join("initdb"), pg_bin.join("postgres")],
            Kind::MariaDb => vec![
                PathBuf::from("/usr/bin/mariadb-install-db"),
                PathBuf::from("/usr/sbin/mariadbd"),
            ],
        };
        if let Some(missing) = needed.iter().find(|path| !path.is_file()) {
            skip(&format!("{} is missing", missing.display()));
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("tmp")).expect("the server's tmpdir");
        let mut server = PrivateServer {
            kind,
            dir,
            port: free_port(),
            child: None,
            pg_bin,
            log_bin,
            memory,
        };
        server.init();
        server.spawn();
        server.wait_ready().await;
        if kind == Kind::MariaDb {
            let mut conn =
                <sqlx::MySqlConnection as sqlx::Connection>::connect(&server.admin_url())
                    .await
                    .expect("connect to the private MariaDB");
            let create = format!("CREATE DATABASE {MARIADB_DATABASE}");
            sqlx::Executor::execute(&mut conn, sqlx::AssertSqlSafe(create))
                .await
                .expect("create database");
        }
        Some(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// MariaDB's temporary files. Never the machine's `/tmp`: a starting `mariadbd` deletes
    /// every `#sql*` file of its tmpdir, and in `/tmp` those are the shared server's temporary
    /// tables, open in its running queries (it then crashes dropping one).
    fn tmp_dir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// A command run as the database's own user when this test runs as root (PostgreSQL refuses
    /// to run as root).
    fn command(&self, program: &Path) -> Command {
        if self.kind == Kind::Postgres && running_as_root() {
            let mut command = Command::new("setpriv");
            command
                .args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                ])
                .arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn init(&self) {
        let log = std::fs::File::create(self.dir.path().join("init.log")).unwrap();
        let mut command = match self.kind {
            Kind::Postgres => {
                if running_as_root() {
                    let status = Command::new("chown")
                        .arg("postgres:")
                        .arg(self.dir.path())
                        .status()
                        .expect("chown");
                    assert!(status.success(), "chown the data dir to postgres");
                }
                let mut command = self.command(&self.pg_bin.join("initdb"));
                command.arg("-D").arg(self.data_dir()).args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                ]);
                command
            }
            Kind::MariaDb => {
                let mut command = Command::new("/usr/bin/mariadb-install-db");
                command
                    .env("TMPDIR", self.tmp_dir())
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data_dir().display()))
                    .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
                if running_as_root() {
                    command.arg("--user=root");
                }
                command
            }
        };
        let status = command
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .expect("run the database's init tool");
        assert!(
            status.success(),
            "init failed: {}",
            std::fs::read_to_string(self.dir.path().join("init.log")).unwrap_or_default()
        );
    }

    /// Starts the server process (logging to `server.log` in its folder).
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .unwrap();
        let mut command = match self.kind {
            Kind::Postgres => {
                let mut command = self.command(&self.pg_bin.join("postgres"));
                command
                    .arg("-D")
                    .arg(self.data_dir())
                    .arg("-p")
                    .arg(self.port.to_string())
                    .arg("-k")
                    .arg(self.dir.path())
                    .args([
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        "fsync=off",
                        "-c",
                        "max_connections=100",
                    ]);
                if let Some(memory) = self.memory {
                    command.arg("-c").arg(format!("shared_buffers={memory}"));
                }
                command
            }
            Kind::MariaDb => {
                let mut command = Command::new("/usr/sbin/mariadbd");
                command
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data_dir().display()))
                    .arg(format!("--tmpdir={}", self.tmp_dir().display()))
                    .arg(format!("--port={}", self.port))
                    .arg(format!(
                        "--socket={}",
                        self.dir.path().join("mysqld.sock").display()
                    ))
                    .args(if self.log_bin {
                        &["--log-bin=binlog", "--binlog-format=ROW", "--server-id=1"][..]
                    } else {
                        &["--skip-log-bin"][..]
                    })
                    .args([
                        "--bind-address=127.0.0.1",
                        "--innodb-flush-log-at-trx-commit=2",
                        "--max-connections=200",
                    ])
                    .arg(format!(
                        "--innodb-buffer-pool-size={}",
                        self.memory
                            .map_or("64M".to_string(), |m| m.replace("GB", "G"))
                    ));
                if running_as_root() {
                    command.arg("--user=root");
                }
                command
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the private database server");
        self.child = Some(child);
    }

    /// Waits until the server accepts connections (at most 60 s).
    pub async fn wait_ready(&self) {
        let what = format!("private {:?} server accepting connections", self.kind);
        super::wait_until(&what, Duration::from_secs(60), || async {
            let connected = match self.kind {
                Kind::Postgres => <sqlx::PgConnection as sqlx::Connection>::connect(&self.url())
                    .await
                    .map(drop),
                Kind::MariaDb => {
                    <sqlx::MySqlConnection as sqlx::Connection>::connect(&self.admin_url())
                        .await
                        .map(drop)
                }
            };
            connected.map_err(|e| {
                let log = std::fs::read_to_string(self.dir.path().join("server.log"));
                format!("{e}; server log:\n{}", log.unwrap_or_default())
            })
        })
        .await
    }

    /// Shuts the server down cleanly (PostgreSQL: fast shutdown) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let signal = match self.kind {
                Kind::Postgres => "-INT",
                Kind::MariaDb => "-TERM",
            };
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
            // Not support::wait_until: this runs on drop, so it must not panic; a server that
            // has not exited after 60 s is killed below.
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(super::POLL_EVERY);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The URL outboxd uses.
    pub fn url(&self) -> String {
        match self.kind {
            Kind::Postgres => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
            Kind::MariaDb => format!("mysql://root@127.0.0.1:{}/{MARIADB_DATABASE}", self.port),
        }
    }

    /// MariaDB: the root user's URL of the `mysql` database (for administration).
    pub fn admin_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}
