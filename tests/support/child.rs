//! A child process run to its end within a deadline ([`output_within`]): a binary under test that
//! hangs fails its test with what it printed and where its threads stood, instead of holding the
//! test until the runner's own timeout kills the test (and leaves the child running, unseen).

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::POLL_EVERY;

/// Runs `command` to its end, like [`Command::output`], for at most `deadline`. Past it, the
/// child's threads' backtraces are taken (with `gdb`, where installed), the child is killed and
/// the test panics with them and everything the child printed.
pub fn output_within(command: &mut Command, deadline: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if started.elapsed() >= deadline {
            break None;
        }
        std::thread::sleep(POLL_EVERY);
    };
    let Some(status) = status else {
        let backtraces = backtraces(&child);
        kill(&mut child);
        let (stdout, stderr) = (collected(stdout), collected(stderr));
        panic!(
            "{command:?} still ran after {deadline:?}: killed.\n\
             --- its threads ---\n{backtraces}\n\
             --- stdout ---\n{}\n--- stderr, its last {TAIL_LINES} lines ---\n{}",
            String::from_utf8_lossy(&stdout),
            tail(&stderr),
        );
    };
    Output {
        status,
        stdout: collected(stdout),
        stderr: collected(stderr),
    }
}

/// How many of a hung child's last lines of stderr (its log) a failure shows.
const TAIL_LINES: usize = 300;

/// Each of those lines cut to this many characters (a statement log holds long ones).
const LINE_CHARS: usize = 400;

/// The last [`TAIL_LINES`] lines of `bytes`, each cut to [`LINE_CHARS`].
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|line| match line.char_indices().nth(LINE_CHARS) {
            Some((cut, _)) => format!("{} …", &line[..cut]),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads a pipe to its end on a thread of its own (a child blocked on a full pipe never exits).
fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

fn collected(reader: JoinHandle<Vec<u8>>) -> Vec<u8> {
    reader.join().unwrap_or_default()
}

/// Every thread's backtrace in `child`, by `gdb` in batch mode (for at most a minute); what went
/// wrong otherwise.
fn backtraces(child: &Child) -> String {
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-nx", "-p", &child.id().to_string()])
        .args(["-ex", "thread apply all bt 30"])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(no backtraces: gdb: {e})"),
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
