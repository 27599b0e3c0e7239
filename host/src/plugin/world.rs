//! Checking a compiled component against the `outbox:publisher/publisher` world and its version
//! rule, and linking it (WASI p2 granting nothing, plus the `logging` import, plus wasi:http for
//! sinks that allow hosts) into an `InstancePre`.
//!
//! Version rule: every `outbox:publisher/…@V` the plugin imports (every plugin imports at least
//! `outbox:publisher/types`, which carries the `event` record) must be semver-compatible with
//! [`WIT_VERSION`]: same major version, and for `0.x` the same minor version (`0.1.0` … `0.1.9`
//! all load on a `0.1.2` host). Anything the plugin uses that the host lacks is then reported
//! by the linker, naming the missing item.

use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{PublisherComponent, PublisherComponentPre};
use super::error::{PluginError, boxed};
use super::state::HostState;

/// The WIT package plugins implement.
pub const WIT_PACKAGE: &str = "outbox:publisher";
/// The version of [`WIT_PACKAGE`] this host is built from (`wit/publisher.wit`).
pub const WIT_VERSION: &str = "0.1.2";
/// The versions this host loads, as shown to users.
pub const SUPPORTED_VERSIONS: &str = "0.1.x";

/// Interfaces the host links, by `namespace:package/` prefix. [`HTTP_PREFIX`] is linked only
/// for sinks whose `limits.allow_hosts` is not empty.
const PROVIDED: &[&str] = &[
    "outbox:publisher/",
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:http/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];

/// The prefix of the wasi:http interfaces (`outgoing-handler`, `types`).
const HTTP_PREFIX: &str = "wasi:http/";

/// The prefix of the `broker` interface, which a plugin may use only on a sink with
/// `limits.allow_brokers`.
const BROKER_PREFIX: &str = "outbox:publisher/broker@";

/// The prefix of the `trace` interface (an event's trace context, WIT 0.1.2).
const TRACE_PREFIX: &str = "outbox:publisher/trace@";

/// What a component imports and exports, once it passed the world and version checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldInfo {
    /// The `outbox:publisher` version the plugin was built against, from its imports.
    pub version: Option<String>,
    /// Every import name, in the component's order.
    pub imports: Vec<String>,
    /// Every export name, in the component's order.
    pub exports: Vec<String>,
}

impl WorldInfo {
    /// Whether the plugin imports wasi:http (outbound HTTP), which a sink links only when its
    /// `limits.allow_hosts` is not empty.
    pub fn imports_http(&self) -> bool {
        self.imports
            .iter()
            .any(|name| name.starts_with(HTTP_PREFIX))
    }

    /// Whether the plugin imports the `broker` interface, which it may use only on a sink whose
    /// `limits.allow_brokers` names connections.
    pub fn imports_broker(&self) -> bool {
        self.imports
            .iter()
            .any(|name| name.starts_with(BROKER_PREFIX))
    }

    /// Whether the plugin imports the `trace` interface (asks for events' trace contexts); a
    /// plugin that never calls it does not (wit-component drops unused imports), and its calls
    /// need no contexts.
    pub fn imports_trace(&self) -> bool {
        self.imports
            .iter()
            .any(|name| name.starts_with(TRACE_PREFIX))
    }
}

/// Checks `component`'s imports (version, provided interfaces) and exports (`init`, `publish`).
pub fn inspect(
    engine: &Engine,
    path: &Path,
    component: &Component,
) -> Result<WorldInfo, PluginError> {
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let exports: Vec<(String, bool)> = ty
        .exports(engine)
        .map(|(name, item)| {
            (
                name.to_string(),
                matches!(item.ty, ComponentItem::ComponentFunc(_)),
            )
        })
        .collect();
    let mut version = None;
    for name in &imports {
        if let Some(rest) = name
            .strip_prefix(WIT_PACKAGE)
            .and_then(|r| r.strip_prefix('/'))
        {
            let found = rest.split_once('@').map(|(_, v)| v);
            match found {
                Some(v) if compatible(v) => version = Some(v.to_string()),
                _ => {
                    return Err(PluginError::Version {
                        path: path.to_path_buf(),
                        found: name.clone(),
                        supported: SUPPORTED_VERSIONS,
                    });
                }
            }
        }
    }
    for wanted in ["init", "publish"] {
        if !exports
            .iter()
            .any(|(name, is_func)| name == wanted && *is_func)
        {
            let names: Vec<&str> = exports.iter().map(|(n, _)| n.as_str()).collect();
            return Err(PluginError::WrongWorld {
                path: path.to_path_buf(),
                reason: format!(
                    "missing export function `{wanted}` (it exports: {})",
                    if names.is_empty() {
                        "nothing".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            });
        }
    }
    if let Some(unknown) = imports
        .iter()
        .find(|name| !PROVIDED.iter().any(|prefix| name.starts_with(prefix)))
    {
        return Err(PluginError::UnsupportedImport {
            path: path.to_path_buf(),
            import: unknown.clone(),
        });
    }
    Ok(WorldInfo {
        version,
        imports,
        exports: exports.into_iter().map(|(name, _)| name).collect(),
    })
}

/// Links `component` against WASI p2 and the `outbox:publisher` imports (`logging`, `broker`),
/// plus wasi:http when `http`, and type-checks its exports.
pub(super) fn link(
    engine: &Engine,
    path: &Path,
    component: &Component,
    http: bool,
) -> Result<PublisherComponentPre<HostState>, PluginError> {
    let link_error = |e: wasmtime::Error| PluginError::Link {
        path: path.to_path_buf(),
        source: boxed(e),
    };
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link_error)?;
    if http {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link_error)?;
    }
    PublisherComponent::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
        .map_err(link_error)?;
    let pre = linker.instantiate_pre(component).map_err(link_error)?;
    PublisherComponentPre::new(pre).map_err(|e| PluginError::WrongWorld {
        path: path.to_path_buf(),
        reason: format!("{:#}", e),
    })
}

/// Whether `version` (e.g. `0.1.3`) is semver-compatible with [`WIT_VERSION`].
fn compatible(version: &str) -> bool {
    fn parse(v: &str) -> Option<(u64, u64, u64, bool)> {
        let (core, pre) = match v.split_once('-') {
            Some((core, _)) => (core, true),
            None => (v.split('+').next().unwrap_or(v), false),
        };
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some((major, minor, patch, pre))
    }
    let (Some(host), Some(plugin)) = (parse(WIT_VERSION), parse(version)) else {
        return false;
    };
    if plugin.3 {
        return plugin == host;
    }
    match host.0 {
        0 => plugin.0 == 0 && plugin.1 == host.1 && host.1 != 0,
        major => plugin.0 == major,
    }
}

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn semver_compatible_versions_load() {
        assert!(compatible("0.1.0"));
        assert!(compatible("0.1.9"));
        assert!(compatible("0.1.2+build"));
        assert!(!compatible("0.2.0"));
        assert!(!compatible("1.0.0"));
        assert!(!compatible("0.1.0-rc1"));
        assert!(!compatible("0.1"));
        assert!(!compatible("x"));
    }
}
