//! How `outboxd plugin test` prints what its stand-in broker received: a line naming the
//! broker, its kind and its answer, then each message with its destination, key, id, headers
//! and payload size, one field per line.

use std::fmt;

use outboxd::broker::{Message, StandInBroker};

/// The stand-in broker and the messages it received; `Display` prints them, each line ending in
/// a newline.
pub struct StandInReport<'a> {
    /// The stand-in broker.
    pub broker: &'a StandInBroker,
    /// The messages that reached it, in order.
    pub received: &'a [Message],
}

impl fmt::Display for StandInReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.received.len();
        writeln!(
            f,
            "stand-in broker `{}` ({}) answering {}: {count} message{} received",
            self.broker.name(),
            self.broker.kind(),
            self.broker.answer(),
            if count == 1 { "" } else { "s" }
        )?;
        for message in self.received {
            writeln!(f, "message {}", printable(&message.message_id))?;
            writeln!(f, "  destination: {}", printable(&message.topic))?;
            writeln!(f, "  key:         {}", key(message.key.as_deref()))?;
            for (name, value) in &message.headers {
                writeln!(
                    f,
                    "  header:      {}: {}",
                    printable(name),
                    printable(value)
                )?;
            }
            writeln!(f, "  payload:     {} bytes", message.payload.len())?;
        }
        Ok(())
    }
}

/// A message key: its text when it is UTF-8, else its bytes in hex.
fn key(key: Option<&[u8]>) -> String {
    match key {
        None => "(none)".to_string(),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => printable(text),
            Err(_) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                format!("0x{hex} ({} bytes, not UTF-8)", bytes.len())
            }
        },
    }
}

/// `text` as it is, or quoted with escapes when it holds a control character (a line break
/// would split a field over two lines).
fn printable(text: &str) -> String {
    if text.chars().any(char::is_control) {
        format!("{text:?}")
    } else {
        text.to_string()
    }
}
