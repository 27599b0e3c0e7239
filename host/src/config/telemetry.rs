//! `[telemetry]` section: the host's own spans, exported over OTLP (off by default), and the
//! console's link to a tracing UI.
//!
//! Tracing is on when the section sets an `endpoint` (or `exporter = "otlp"`), or, as in every
//! OpenTelemetry SDK, when the environment says `OTEL_TRACES_EXPORTER=otlp`. What the section
//! leaves unset comes from the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, and their `_TRACES_` forms).
//! `OTEL_SDK_DISABLED=true` turns tracing off whatever the section says.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// The only OTLP protocol outboxd exports with.
pub const OTLP_HTTP_PROTOBUF: &str = "http/protobuf";

/// Spans waiting for export, at most, by default (more are dropped and counted, never waited
/// for).
pub const DEFAULT_SPAN_QUEUE: usize = 65_536;

/// Where spans go when neither the section nor the environment names a collector (the OTLP
/// default).
pub const DEFAULT_TRACES_ENDPOINT: &str = "http://localhost:4318/v1/traces";

/// Deadline of one export request when neither the section nor the environment sets one (the
/// OTLP default).
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[telemetry]`, validated and resolved against the `OTEL_*` environment.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where and how spans are exported; `None`: tracing is off.
    pub traces: Option<TraceExport>,
    /// The console's link from an event's trace id to a tracing UI: a URL with `{trace_id}` in it.
    pub trace_url: Option<String>,
}

/// How the host's spans are exported (OTLP over http/protobuf).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceExport {
    /// The collector's traces URL: `telemetry.endpoint` with `/v1/traces`, else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with
    /// `/v1/traces`, else [`DEFAULT_TRACES_ENDPOINT`].
    pub endpoint: String,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// Further resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// Share of traces sampled, 0.0 to 1.0 (a producer's sampled flag decides for the first
    /// attempt of an event it traced).
    pub sampling_ratio: f64,
    /// Headers sent with every export: `OTEL_EXPORTER_OTLP_HEADERS`, then
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, then `telemetry.headers` (a later one wins).
    pub headers: BTreeMap<String, String>,
    /// Deadline of one export request: `telemetry.timeout`, else
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else
    /// [`DEFAULT_EXPORT_TIMEOUT`].
    pub timeout: Duration,
    /// Spans waiting for export, at most; more are dropped (delivery never waits for export).
    pub queue_size: usize,
}

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTelemetry {
    exporter: Option<String>,
    endpoint: Option<String>,
    protocol: Option<String>,
    service_name: Option<String>,
    sampling_ratio: Option<f64>,
    headers: BTreeMap<String, String>,
    #[serde(with = "humantime_serde")]
    timeout: Option<Duration>,
    queue_size: Option<usize>,
    trace_url: Option<String>,
}

impl RawTelemetry {
    /// The section checked and completed from the `OTEL_*` variables `env` looks up.
    pub(super) fn validate(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<TelemetryConfig, ConfigError> {
        let trace_url = self.trace_url.clone();
        if let Some(url) = &trace_url
            && (!url.contains("{trace_id}")
                || !(url.starts_with("http://") || url.starts_with("https://")))
        {
            return Err(invalid(
                "telemetry.trace_url",
                format!(
                    "{url:?} must be an http(s) URL with {{trace_id}} in it, e.g. \"http://jaeger:16686/trace/{{trace_id}}\""
                ),
            ));
        }
        let traces = if self.enabled(env)? {
            Some(self.export(env)?)
        } else {
            None
        };
        Ok(TelemetryConfig { traces, trace_url })
    }

    /// Whether spans are exported: `OTEL_SDK_DISABLED=true` never; else `exporter` (or
    /// `"otlp"` when an `endpoint` is set), else `OTEL_TRACES_EXPORTER`; else not.
    fn enabled(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, ConfigError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(false);
        }
        let (key, exporter) = match (&self.exporter, &self.endpoint) {
            (Some(exporter), _) => ("telemetry.exporter", exporter.clone()),
            (None, Some(_)) => ("telemetry.endpoint", "otlp".to_string()),
            (None, None) => match env("OTEL_TRACES_EXPORTER") {
                Some(exporter) => ("OTEL_TRACES_EXPORTER", exporter),
                None => return Ok(false),
            },
        };
        match exporter.trim().to_ascii_lowercase().as_str() {
            "otlp" => Ok(true),
            "none" | "" => Ok(false),
            other => Err(invalid(
                key,
                format!("exporter {other:?} is not supported: \"otlp\" or \"none\""),
            )),
        }
    }

    /// The export settings: the section's, else the environment's, else the defaults.
    fn export(self, env: &dyn Fn(&str) -> Option<String>) -> Result<TraceExport, ConfigError> {
        let protocol = [
            ("telemetry.protocol", self.protocol.clone()),
            (
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
            ),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                env("OTEL_EXPORTER_OTLP_PROTOCOL"),
            ),
        ]
        .into_iter()
        .find_map(|(key, value)| value.map(|value| (key, value)));
        if let Some((key, protocol)) = protocol
            && protocol.trim() != OTLP_HTTP_PROTOBUF
        {
            return Err(invalid(
                key,
                format!(
                    "protocol {protocol:?} is not supported: outboxd exports OTLP over \
                     \"{OTLP_HTTP_PROTOBUF}\" (port 4318 on a collector)"
                ),
            ));
        }
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let endpoint = match (
            self.endpoint,
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(base), _, _) => traces_url("telemetry.endpoint", &base, true)?,
            // The signal's own variable is the whole URL (the OTLP exporter specification).
            (None, Some(url), _) => traces_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url, false)?,
            (None, None, Some(base)) => traces_url("OTEL_EXPORTER_OTLP_ENDPOINT", &base, true)?,
            (None, None, None) => DEFAULT_TRACES_ENDPOINT.to_string(),
        };
        let resource = key_values(env("OTEL_RESOURCE_ATTRIBUTES").as_deref());
        let service_name = self
            .service_name
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| "outboxd".to_string());
        let sampling_ratio = match self.sampling_ratio {
            Some(ratio) => check_ratio("telemetry.sampling_ratio", ratio)?,
            None => sampler_ratio(env)?,
        };
        let mut headers = BTreeMap::new();
        for (key, members) in [
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                key_values(env("OTEL_EXPORTER_OTLP_HEADERS").as_deref()),
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                key_values(env("OTEL_EXPORTER_OTLP_TRACES_HEADERS").as_deref()),
            ),
            ("telemetry.headers", self.headers.into_iter().collect()),
        ] {
            for (name, value) in members {
                if http::HeaderName::try_from(name.as_str()).is_err()
                    || http::HeaderValue::try_from(value.as_str()).is_err()
                {
                    return Err(invalid(
                        key,
                        format!("{name:?} is not a valid HTTP header name and value"),
                    ));
                }
                headers.insert(name.to_ascii_lowercase(), value);
            }
        }
        let timeout = match self.timeout {
            Some(timeout) if timeout.is_zero() => {
                return Err(invalid("telemetry.timeout", "must be greater than 0"));
            }
            Some(timeout) => timeout,
            None => match [
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ]
            .into_iter()
            .find_map(|key| set(key).map(|value| (key, value)))
            {
                Some((key, value)) => match value.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => Duration::from_millis(ms),
                    _ => {
                        return Err(invalid(
                            key,
                            format!("{value:?} is not a positive number of milliseconds"),
                        ));
                    }
                },
                None => DEFAULT_EXPORT_TIMEOUT,
            },
        };
        let queue_size = self.queue_size.unwrap_or(DEFAULT_SPAN_QUEUE);
        if !(512..=16_777_216).contains(&queue_size) {
            return Err(invalid(
                "telemetry.queue_size",
                format!("must be 512..=16777216 spans, got {queue_size}"),
            ));
        }
        Ok(TraceExport {
            endpoint,
            service_name,
            resource: resource
                .into_iter()
                .filter(|(k, _)| k != "service.name")
                .collect(),
            sampling_ratio,
            headers,
            timeout,
            queue_size,
        })
    }
}

/// `base` (a collector's URL) checked; with `append`, `/v1/traces` appended unless it already
/// ends so.
fn traces_url(key: &str, base: &str, append: bool) -> Result<String, ConfigError> {
    let base = base.trim();
    let url = url::Url::parse(base).map_err(|e| invalid(key, format!("{base:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(
            key,
            format!("{base:?} must be an http:// or https:// URL of an OTLP collector"),
        ));
    }
    if !append || url.path().trim_end_matches('/').ends_with("/v1/traces") {
        return Ok(base.to_string());
    }
    Ok(format!("{}/v1/traces", base.trim_end_matches('/')))
}

/// A ratio of 0.0 to 1.0, or an error naming `key`.
fn check_ratio(key: &str, ratio: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(invalid(key, format!("must be 0.0..=1.0, got {ratio}")))
    }
}

/// The sampling ratio `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` describe (outboxd
/// always honours a producer's sampled flag for an event's first attempt: the `parentbased_`
/// samplers).
fn sampler_ratio(env: &dyn Fn(&str) -> Option<String>) -> Result<f64, ConfigError> {
    let Some(sampler) = env("OTEL_TRACES_SAMPLER") else {
        return Ok(1.0);
    };
    let argument = || -> Result<f64, ConfigError> {
        match env("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(arg) => {
                let ratio = arg.trim().parse::<f64>().map_err(|_| {
                    invalid(
                        "OTEL_TRACES_SAMPLER_ARG",
                        format!("{arg:?} is not a number"),
                    )
                })?;
                check_ratio("OTEL_TRACES_SAMPLER_ARG", ratio)
            }
        }
    };
    match sampler.trim() {
        "always_on" | "parentbased_always_on" => Ok(1.0),
        "always_off" | "parentbased_always_off" => Ok(0.0),
        "traceidratio" | "parentbased_traceidratio" => argument(),
        other => Err(invalid(
            "OTEL_TRACES_SAMPLER",
            format!(
                "{other:?} is not supported: parentbased_traceidratio, parentbased_always_on, \
                 parentbased_always_off (or the same without parentbased_)"
            ),
        )),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES` or `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,key=value`, values
/// percent-encoded) as pairs; a malformed member is skipped, as the SDKs do.
fn key_values(text: Option<&str>) -> Vec<(String, String)> {
    let Some(text) = text else {
        return Vec::new();
    };
    text.split(',')
        .filter_map(|member| {
            let (key, value) = member.split_once('=')?;
            let key = key.trim();
            let value = url::form_urlencoded::parse(format!("v={}", value.trim()).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())?;
            (!key.is_empty()).then(|| (key.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(section: &str, env: &[(&str, &str)]) -> Result<TelemetryConfig, ConfigError> {
        let raw: RawTelemetry = toml::from_str(section).unwrap();
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        raw.validate(&lookup)
    }

    #[test]
    fn off_unless_the_section_or_the_environment_turns_it_on() {
        assert_eq!(resolve("", &[]).unwrap().traces, None);
        assert_eq!(
            resolve("", &[("OTEL_TRACES_EXPORTER", "none")])
                .unwrap()
                .traces,
            None
        );
        let on = resolve("", &[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap();
        let traces = on.traces.unwrap();
        assert_eq!(traces.endpoint, DEFAULT_TRACES_ENDPOINT);
        assert_eq!(traces.timeout, DEFAULT_EXPORT_TIMEOUT);
        assert_eq!(traces.service_name, "outboxd");
        assert_eq!(traces.sampling_ratio, 1.0);
        assert_eq!(traces.queue_size, DEFAULT_SPAN_QUEUE);
        let section = resolve("endpoint = \"http://collector:4318\"", &[]).unwrap();
        assert_eq!(
            section.traces.unwrap().endpoint,
            "http://collector:4318/v1/traces"
        );
        let disabled = resolve(
            "endpoint = \"http://collector:4318\"",
            &[("OTEL_SDK_DISABLED", "true")],
        );
        assert_eq!(disabled.unwrap().traces, None);
        assert_eq!(
            resolve("exporter = \"none\"\nendpoint = \"http://c:4318\"", &[])
                .unwrap()
                .traces,
            None
        );
    }

    #[test]
    fn the_section_wins_over_the_environment() {
        let env = [
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=live%20audio",
            ),
        ];
        let from_env = resolve("", &env).unwrap().traces.unwrap();
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(from_env.sampling_ratio, 0.25);
        assert_eq!(
            from_env.resource,
            vec![
                ("deployment.environment".to_string(), "prod".to_string()),
                ("team".to_string(), "live audio".to_string())
            ]
        );
        let section = resolve("service_name = \"relay\"\nsampling_ratio = 0.5", &env)
            .unwrap()
            .traces
            .unwrap();
        assert_eq!(section.service_name, "relay");
        assert_eq!(section.sampling_ratio, 0.5);
    }

    #[test]
    fn mistakes_name_the_key_or_variable() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 9] = [
            ("exporter = \"jaeger\"", &[], "telemetry.exporter"),
            (
                "",
                &[("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER",
            ),
            (
                "endpoint = \"http://c:4318\"\nprotocol = \"grpc\"",
                &[],
                "telemetry.protocol",
            ),
            (
                "",
                &[
                    ("OTEL_TRACES_EXPORTER", "otlp"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            ("endpoint = \"collector:4318\"", &[], "telemetry.endpoint"),
            (
                "endpoint = \"http://c:4318\"\nsampling_ratio = 1.5",
                &[],
                "telemetry.sampling_ratio",
            ),
            (
                "",
                &[
                    ("OTEL_TRACES_EXPORTER", "otlp"),
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "-0.1"),
                ],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                "endpoint = \"http://c:4318\"\nqueue_size = 10",
                &[],
                "telemetry.queue_size",
            ),
            (
                "trace_url = \"http://jaeger/trace\"",
                &[],
                "telemetry.trace_url",
            ),
        ];
        for (section, env, key) in cases {
            let error = resolve(section, env).unwrap_err().to_string();
            assert!(error.contains(key), "{section:?} {env:?}: {error}");
        }
    }

    #[test]
    fn boundaries_are_accepted() {
        for ratio in ["0.0", "1.0"] {
            let section =
                format!("endpoint = \"https://c\"\nsampling_ratio = {ratio}\nqueue_size = 512");
            assert!(resolve(&section, &[]).is_ok(), "{section}");
        }
        assert_eq!(
            resolve("endpoint = \"http://c:4318/v1/traces\"", &[])
                .unwrap()
                .traces
                .unwrap()
                .endpoint,
            "http://c:4318/v1/traces"
        );
        let timeout = |ms: &str| {
            resolve(
                "",
                &[
                    ("OTEL_TRACES_EXPORTER", "otlp"),
                    ("OTEL_EXPORTER_OTLP_TIMEOUT", ms),
                ],
            )
            .map(|c| c.traces.unwrap().timeout)
        };
        assert_eq!(timeout("1").unwrap(), Duration::from_millis(1));
        for bad in ["0", "-5", "10s"] {
            let error = timeout(bad).unwrap_err().to_string();
            assert!(
                error.contains("OTEL_EXPORTER_OTLP_TIMEOUT"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_environment_names_the_collector_its_headers_and_deadline() {
        let env = [
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318/"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Bearer%20a,x-team=live",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=audio"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ];
        let traces = resolve("", &env).unwrap().traces.unwrap();
        assert_eq!(traces.endpoint, "http://base:4318/v1/traces");
        assert_eq!(traces.timeout, Duration::from_millis(2500));
        assert_eq!(
            traces.headers.into_iter().collect::<Vec<_>>(),
            vec![
                ("authorization".to_string(), "Bearer a".to_string()),
                ("x-team".to_string(), "audio".to_string()),
            ]
        );
        // The signal's own URL is taken as it is; the section wins over both.
        let mut own = env.to_vec();
        own.push(("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c/otlp/spans"));
        let traces = resolve("timeout = \"3s\"\n[headers]\nx-team = \"relay\"", &own)
            .unwrap()
            .traces
            .unwrap();
        assert_eq!(traces.endpoint, "https://c/otlp/spans");
        assert_eq!(traces.timeout, Duration::from_secs(3));
        assert_eq!(traces.headers["x-team"], "relay");
        let section = resolve("endpoint = \"http://mine:4318\"", &own).unwrap();
        assert_eq!(
            section.traces.unwrap().endpoint,
            "http://mine:4318/v1/traces"
        );
        let bad = resolve(
            "",
            &[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318"),
            ],
        );
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        );
    }
}
