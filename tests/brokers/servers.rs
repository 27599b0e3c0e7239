//! Private brokers for the fault tests: redis-server, nats-server (JetStream on disk), mosquitto
//! (persistent) and tansu, each on a free port with a data folder of its own, killed with
//! SIGKILL when the test asks and restarted on the same port and folder; killed when dropped.
//! Never the shared brokers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::kit::Kind;
use super::support::in_ci;
use super::support::private_server::free_port;

/// A broker process of a test's own.
pub struct PrivateBroker {
    kind: Kind,
    /// The port it listens on.
    pub port: u16,
    /// The address tansu advertises (a proxy in front of it), if not its own.
    advertised: Option<u16>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// The tansu binary: `OUTBOXD_TEST_TANSU`, else `.toolchains/kafka/tansu` (`make kafka-broker`).
fn tansu() -> PathBuf {
    std::env::var("OUTBOXD_TEST_TANSU").map_or_else(
        |_| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../.toolchains/kafka/tansu"
            ))
        },
        PathBuf::from,
    )
}

fn binary(kind: Kind) -> PathBuf {
    match kind {
        Kind::Redis => "/usr/bin/redis-server".into(),
        Kind::Nats => "/usr/sbin/nats-server".into(),
        Kind::Mqtt => "/usr/sbin/mosquitto".into(),
        Kind::Kafka => tansu(),
        Kind::Rabbit => unreachable!("the RabbitMQ fault test uses a proxy"),
    }
}

impl PrivateBroker {
    /// Starts a broker of `kind` (tansu advertising `advertised` as its port, when given);
    /// `None` without its binary (a panic under CI).
    pub async fn start(kind: Kind, advertised: Option<u16>) -> Option<PrivateBroker> {
        PrivateBroker::start_at(kind, free_port(), advertised).await
    }

    /// [`PrivateBroker::start`] on `port`.
    pub async fn start_at(kind: Kind, port: u16, advertised: Option<u16>) -> Option<PrivateBroker> {
        let bin = binary(kind);
        if !bin.is_file() {
            assert!(!in_ci(), "{} is missing under CI=true", bin.display());
            eprintln!(
                "SKIPPED (no {}; `make kafka-broker` installs tansu)",
                bin.display()
            );
            return None;
        }
        let mut broker = PrivateBroker {
            kind,
            port,
            advertised,
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        broker.spawn();
        broker.wait_ready().await;
        Some(broker)
    }

    /// The URL outboxd and the reader use (through `advertised` for tansu).
    pub fn url(&self) -> String {
        let port = self.advertised.unwrap_or(self.port);
        match self.kind {
            Kind::Redis => format!("redis://127.0.0.1:{port}/0"),
            Kind::Nats => format!("nats://127.0.0.1:{port}"),
            Kind::Mqtt => format!("mqtt://127.0.0.1:{port}"),
            Kind::Kafka => format!("kafka://127.0.0.1:{port}"),
            Kind::Rabbit => unreachable!(),
        }
    }

    fn spawn(&mut self) {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let port = self.port.to_string();
        let mut command = Command::new(binary(self.kind));
        match self.kind {
            Kind::Redis => {
                command.args(["--port", &port, "--bind", "127.0.0.1", "--save", ""]);
                command.args(["--appendonly", "yes", "--appendfsync", "always"]);
                command.arg("--dir").arg(&data);
            }
            Kind::Nats => {
                command.args(["-a", "127.0.0.1", "-p", &port, "-js", "-sd"]);
                command.arg(&data);
            }
            Kind::Mqtt => {
                let conf = self.dir.path().join("mosquitto.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "listener {port} 127.0.0.1\nallow_anonymous true\nuser root\npersistence true\n\
                         persistence_location {}/\nautosave_interval 1\n\
                         autosave_on_changes true\nmax_queued_messages 0\n",
                        data.display()
                    ),
                )
                .unwrap();
                command.arg("-c").arg(&conf);
            }
            Kind::Kafka => {
                let advertised = self.advertised.unwrap_or(self.port);
                command.args(["broker", "--listener-url"]);
                command.arg(format!("tcp://127.0.0.1:{port}"));
                command.arg("--advertised-listener-url");
                command.arg(format!("tcp://127.0.0.1:{advertised}"));
            }
            Kind::Rabbit => unreachable!(),
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the private broker");
        self.child = Some(child);
    }

    /// Waits until its port accepts connections (at most 20 s).
    async fn wait_ready(&self) {
        let port = self.port;
        super::support::wait_until(
            "the private broker listens",
            Duration::from_secs(20),
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        )
        .await;
    }

    /// Kills it (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data folder.
    pub async fn restart(&mut self) {
        self.spawn();
        self.wait_ready().await;
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.kill();
    }
}
