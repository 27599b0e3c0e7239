//! Typed parsing of a sink's settings (the `config` table `init` receives), with errors naming
//! the key.
//!
//! Read every key the plugin knows ([`Config::required`], [`Config::optional`],
//! [`Config::parse`], [`Config::positive`], [`Config::choice`], [`Config::flag`]), then call
//! [`Config::finish`]: a key nobody read is an error listing the known ones, so a typo never
//! passes silently. Errors quote the bad value, except [`Config::required`] and
//! [`Config::optional`] values (which may be secrets) that are never quoted.

use std::fmt;
use std::str::FromStr;

/// The sink's settings as `(key, value)` pairs, and the keys read so far.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pairs: Vec<(String, String)>,
    known: Vec<String>,
}

/// A bad setting: the key and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting's key (for an unknown setting, that key).
    pub key: String,
    /// The whole message, naming the key.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for String {
    fn from(error: ConfigError) -> String {
        error.message
    }
}

impl Config {
    /// Settings from `(key, value)` pairs (as `init` receives them).
    pub fn new(pairs: Vec<(String, String)>) -> Config {
        Config {
            pairs,
            known: Vec::new(),
        }
    }

    /// Settings from borrowed pairs (handy in tests).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Config {
        Config::new(
            pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        )
    }

    /// Every `(key, value)` pair, as given.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value of `key`, if set.
    pub fn optional(&mut self, key: &str) -> Option<String> {
        self.mark(key);
        self.value(key).map(str::to_string)
    }

    /// The value of `key`; an error when it is missing or empty.
    pub fn required(&mut self, key: &str) -> Result<String, ConfigError> {
        match self.optional(key) {
            Some(value) if !value.is_empty() => Ok(value),
            Some(_) => Err(error(key, format!("`{key}` must not be empty"))),
            None => Err(error(key, format!("the `{key}` setting is required"))),
        }
    }

    /// `key` parsed as a `T` (`what` describes the expected form, e.g. "a URL"); `None` when
    /// unset. The error quotes the value.
    pub fn parse<T: FromStr>(&mut self, key: &str, what: &str) -> Result<Option<T>, ConfigError> {
        let Some(value) = self.optional(key) else {
            return Ok(None);
        };
        value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| error(key, format!("`{key}` must be {what}, not `{value}`")))
    }

    /// `key` as an integer greater than zero; `None` when unset.
    pub fn positive(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.parse::<u64>(key, "a positive integer")? {
            Some(0) => Err(error(
                key,
                format!("`{key}` must be a positive integer, not `0`"),
            )),
            other => Ok(other),
        }
    }

    /// `key` as one of `choices`; `None` when unset. The error lists the choices:
    /// ``unknown format `xml`: use `json` or `text` ``.
    pub fn choice<'a>(
        &mut self,
        key: &str,
        choices: &[&'a str],
    ) -> Result<Option<&'a str>, ConfigError> {
        let Some(value) = self.optional(key) else {
            return Ok(None);
        };
        choices
            .iter()
            .find(|choice| **choice == value)
            .copied()
            .map(Some)
            .ok_or_else(|| {
                error(
                    key,
                    format!("unknown {key} `{value}`: use {}", either(choices)),
                )
            })
    }

    /// `key` as `true` or `false`; `None` when unset.
    pub fn flag(&mut self, key: &str) -> Result<Option<bool>, ConfigError> {
        Ok(self
            .choice(key, &["true", "false"])?
            .map(|value| value == "true"))
    }

    /// Checks that every key given was read: the first unknown one is an error listing the
    /// known settings.
    pub fn finish(self) -> Result<(), ConfigError> {
        match self
            .pairs
            .iter()
            .find(|(key, _)| !self.known.iter().any(|known| known == key))
        {
            None => Ok(()),
            Some((key, _)) if self.known.is_empty() => Err(error(
                key,
                format!("unknown setting `{key}`: this plugin takes no settings"),
            )),
            Some((key, _)) => Err(error(
                key,
                format!(
                    "unknown setting `{key}`: the settings are {}",
                    self.known.join(", ")
                ),
            )),
        }
    }

    fn value(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.as_str())
    }

    fn mark(&mut self, key: &str) {
        if !self.known.iter().any(|known| known == key) {
            self.known.push(key.to_string());
        }
    }
}

/// A [`ConfigError`] for `key`.
fn error(key: &str, message: String) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message,
    }
}

/// `` `a` ``, `` `a` or `b` ``, `` `a`, `b` or `c` ``.
fn either(choices: &[&str]) -> String {
    let quoted: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
    match quoted.split_last() {
        None => "nothing".to_string(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_typed_values_and_defaults() {
        let mut config = Config::from_pairs(&[
            ("format", "text"),
            ("quiet", "true"),
            ("timeout_ms", "250"),
            ("url", "http://h/"),
        ]);
        assert_eq!(config.required("url").unwrap(), "http://h/");
        assert_eq!(config.positive("timeout_ms").unwrap(), Some(250));
        assert_eq!(
            config.choice("format", &["json", "text"]).unwrap(),
            Some("text")
        );
        assert_eq!(config.flag("quiet").unwrap(), Some(true));
        assert_eq!(config.optional("missing"), None);
        assert_eq!(config.positive("also_missing").unwrap(), None);
        config.finish().unwrap();
    }

    #[test]
    fn errors_name_the_key() {
        let mut config = Config::from_pairs(&[("format", "xml")]);
        assert_eq!(
            config
                .choice("format", &["json", "text"])
                .unwrap_err()
                .message,
            "unknown format `xml`: use `json` or `text`"
        );
        let mut config = Config::from_pairs(&[("n", "0"), ("m", "x")]);
        let zero = config.positive("n").unwrap_err();
        assert_eq!(zero.key, "n");
        assert_eq!(zero.message, "`n` must be a positive integer, not `0`");
        assert_eq!(
            config.positive("m").unwrap_err().message,
            "`m` must be a positive integer, not `x`"
        );
        assert_eq!(
            Config::default().required("url").unwrap_err().message,
            "the `url` setting is required"
        );
        let mut empty = Config::from_pairs(&[("secret", "")]);
        assert_eq!(
            empty.required("secret").unwrap_err().message,
            "`secret` must not be empty"
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_finish() {
        let mut config = Config::from_pairs(&[("url", "u"), ("verbose", "1")]);
        config.optional("url");
        config.optional("secret");
        let error = config.finish().unwrap_err();
        assert_eq!(error.key, "verbose");
        assert_eq!(
            error.message,
            "unknown setting `verbose`: the settings are url, secret"
        );
        assert_eq!(
            Config::from_pairs(&[("x", "1")])
                .finish()
                .unwrap_err()
                .message,
            "unknown setting `x`: this plugin takes no settings"
        );
    }

    #[test]
    fn required_values_are_never_quoted() {
        let mut config = Config::from_pairs(&[("secret", "")]);
        let message = String::from(config.required("secret").unwrap_err());
        assert!(message.contains("secret"));
    }
}
