//! [`ByteSize`]: a size in bytes as config writes it (`4096`, `"64MiB"`, `"10 MB"`).

use serde::{Deserialize, Deserializer};

/// A size in bytes, written in config as a number or a string like `"64MiB"`, `"512KiB"`, `"1GB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses `"64MiB"`, `"10 MB"`, `"4096"`, … (KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000).
    pub fn parse(text: &str) -> Result<ByteSize, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let number: u64 = digits.parse().map_err(|_| {
            format!("invalid size {text:?}: expected a number with an optional unit like 64MiB")
        })?;
        let multiplier: u64 = match unit.trim() {
            "" | "B" => 1,
            "KB" | "kB" => 1_000,
            "KiB" => 1 << 10,
            "MB" => 1_000_000,
            "MiB" => 1 << 20,
            "GB" => 1_000_000_000,
            "GiB" => 1 << 30,
            other => {
                return Err(format!(
                    "invalid size unit {other:?} in {text:?}: use B, KiB, MiB, GiB, KB, MB or GB"
                ));
            }
        };
        number
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(|| format!("size {text:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(text) => ByteSize::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}
