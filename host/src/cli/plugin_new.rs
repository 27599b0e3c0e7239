//! `outboxd plugin new NAME --lang rust|python|js`: writes a plugin project from the templates in
//! `plugins/templates/` (compiled into the binary), ready to build with `make` and to pass
//! `outboxd plugin test` (`make test`).
//!
//! Every project gets a `README.md` for its author, a `Makefile` (`build`, `test`) and a
//! `.gitignore`. Python and JavaScript projects carry a copy of `wit/publisher.wit` (the contract
//! this outboxd speaks) for their bindings generator. A Rust project depends on the guest SDK
//! (`plugins/sdk`) by path: `--sdk-path`, by default the SDK of the source tree outboxd was built
//! from, when it is still there.

use std::path::{Path, PathBuf};

use outboxd::plugin::world::WIT_VERSION;

/// The contract, copied into Python and JavaScript projects.
const WIT: &str = include_str!("../../../wit/publisher.wit");
/// The componentize-py version Python projects install (as `plugins/toolchain/requirements.txt`).
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The componentize-js version JavaScript projects install (as `plugins/toolchain/package.json`).
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// A project's files: path in the project → template text.
type Files = &'static [(&'static str, &'static str)];

const RUST: Files = &[
    (
        "Cargo.toml",
        include_str!("../../../plugins/templates/rust/Cargo.toml.tmpl"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../plugins/templates/rust/src/lib.rs.tmpl"),
    ),
    (
        "Makefile",
        include_str!("../../../plugins/templates/rust/Makefile.tmpl"),
    ),
];
const PYTHON: Files = &[
    (
        "app.py",
        include_str!("../../../plugins/templates/python/app.py.tmpl"),
    ),
    (
        "Makefile",
        include_str!("../../../plugins/templates/python/Makefile.tmpl"),
    ),
    ("wit/publisher.wit", WIT),
];
const JS: Files = &[
    (
        "plugin.js",
        include_str!("../../../plugins/templates/js/plugin.js.tmpl"),
    ),
    (
        "package.json",
        include_str!("../../../plugins/templates/js/package.json.tmpl"),
    ),
    (
        "Makefile",
        include_str!("../../../plugins/templates/js/Makefile.tmpl"),
    ),
    ("wit/publisher.wit", WIT),
];
const COMMON: Files = &[
    (
        "README.md",
        include_str!("../../../plugins/templates/README.md.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../../../plugins/templates/gitignore.tmpl"),
    ),
];

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, on the guest SDK (`plugins/sdk`), built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// What `outboxd plugin new` writes.
#[derive(Debug, Clone)]
pub struct ScaffoldOptions {
    /// The plugin's name: lower-case letters, digits and `-`, starting with a letter.
    pub name: String,
    /// Its language.
    pub lang: Lang,
    /// The project directory to create (must not exist, or be empty).
    pub dir: PathBuf,
    /// Rust only: the guest SDK crate (`plugins/sdk` of an outboxd checkout).
    pub sdk_path: Option<PathBuf>,
}

/// Why a project could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name is not usable as a plugin, crate and file name.
    #[error(
        "plugin name `{name}` is invalid: use lower-case letters, digits and `-`, starting with a letter (at most 64 characters)"
    )]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The project directory exists and is not empty.
    #[error("{} already exists and is not empty: choose another --dir or name", .path.display())]
    Exists {
        /// The directory.
        path: PathBuf,
    },
    /// No guest SDK found for a Rust project.
    #[error(
        "the Rust guest SDK is not at {}: pass --sdk-path PATH/TO/outboxd/plugins/sdk",
        .path.display()
    )]
    NoSdk {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// Writing a file failed.
    #[error("cannot write {}", .path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The SDK of the source tree this binary was built from.
pub fn default_sdk_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk")
}

/// Writes the project; returns the files written, relative to `options.dir`.
pub fn scaffold(options: &ScaffoldOptions) -> Result<Vec<PathBuf>, ScaffoldError> {
    let name = options.name.as_str();
    if !valid_name(name) {
        return Err(ScaffoldError::InvalidName {
            name: name.to_string(),
        });
    }
    let dir = &options.dir;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(ScaffoldError::Exists { path: dir.clone() });
    }
    let sdk_path = match options.lang {
        Lang::Rust => {
            let wanted = options.sdk_path.clone().unwrap_or_else(default_sdk_path);
            let found = wanted
                .join("Cargo.toml")
                .is_file()
                .then(|| std::fs::canonicalize(&wanted).ok())
                .flatten();
            Some(found.ok_or(ScaffoldError::NoSdk { path: wanted })?)
        }
        Lang::Python | Lang::Js => None,
    };
    let (files, lang, source, build_notes, memory) = match options.lang {
        Lang::Rust => (
            RUST,
            "Rust",
            "src/lib.rs",
            "Needs rustup's `wasm32-wasip2` target (`rustup target add wasm32-wasip2`). The guest SDK \
             `outboxd-plugin` is a path dependency in `Cargo.toml` (an outboxd checkout's \
             `plugins/sdk`); `cargo test` runs the unit tests natively.",
            "32MiB",
        ),
        Lang::Python => (
            PYTHON,
            "Python",
            "app.py",
            "The first `make` installs componentize-py into `.venv` (Python 3.11+ with `venv`); \
             the bindings come from `wit/publisher.wit`. The component is about 18 MB and takes \
             tens of seconds to compile on first load; outboxd caches the compiled artifact.",
            "128MiB",
        ),
        Lang::Js => (
            JS,
            "JavaScript",
            "plugin.js",
            "The first `make` installs componentize-js into `node_modules` (Node 20+); the bindings \
             come from `wit/publisher.wit`. The component is about 12 MB and takes tens of \
             seconds to compile on first load; outboxd caches the compiled artifact.",
            "128MiB",
        ),
    };
    let vars: [(&str, String); 10] = [
        ("name", name.to_string()),
        ("crate_name", name.replace('-', "_")),
        ("type_name", type_name(name)),
        (
            "sdk_path",
            sdk_path
                .as_deref()
                .map(|path| path.display().to_string())
                .unwrap_or_default(),
        ),
        ("wit_version", WIT_VERSION.to_string()),
        ("lang", lang.to_string()),
        ("source", source.to_string()),
        ("build_notes", build_notes.to_string()),
        ("memory", memory.to_string()),
        (
            "componentize_py_version",
            COMPONENTIZE_PY_VERSION.to_string(),
        ),
    ];
    let mut written = Vec::new();
    for (path, template) in files.iter().chain(COMMON) {
        let mut text = render(template, &vars);
        if *path == "package.json" {
            text = text.replace("{{componentize_js_version}}", COMPONENTIZE_JS_VERSION);
        }
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ScaffoldError::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&target, text).map_err(|source| ScaffoldError::Write {
            path: target.clone(),
            source,
        })?;
        written.push(PathBuf::from(path));
    }
    Ok(written)
}

/// `template` with every `{{key}}` of `vars` replaced.
fn render(template: &str, vars: &[(&str, String)]) -> String {
    vars.iter()
        .fold(template.to_string(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}", key = key), value)
        })
}

/// Lower-case letters, digits and `-`, starting with a letter, at most 64 characters.
fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `my-sink` → `MySink`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("my-sink2"));
        assert!(!valid_name("My-sink"));
        assert!(!valid_name("2sink"));
        assert!(!valid_name("sink-"));
        assert!(!valid_name("a_b"));
        assert!(!valid_name(&"a".repeat(65)));
        assert_eq!(type_name("my-sink2"), "MySink2");
    }

    #[test]
    fn writes_every_file_with_no_placeholder_left() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let dir = tempfile::tempdir().unwrap();
            let options = ScaffoldOptions {
                name: "audit-sink".into(),
                lang,
                dir: dir.path().join("audit-sink"),
                sdk_path: None,
            };
            let files = scaffold(&options).unwrap();
            assert!(files.contains(&PathBuf::from("README.md")), "{lang:?}");
            assert!(files.contains(&PathBuf::from("Makefile")), "{lang:?}");
            for file in files {
                let text = std::fs::read_to_string(options.dir.join(&file)).unwrap();
                assert!(!text.contains("{{"), "{lang:?} {}: {text}", file.display());
            }
            let again = scaffold(&options).unwrap_err();
            assert!(matches!(again, ScaffoldError::Exists { .. }), "{again}");
        }
    }

    #[test]
    fn rust_needs_an_sdk() {
        let dir = tempfile::tempdir().unwrap();
        let error = scaffold(&ScaffoldOptions {
            name: "x".into(),
            lang: Lang::Rust,
            dir: dir.path().join("x"),
            sdk_path: Some(dir.path().join("nowhere")),
        })
        .unwrap_err();
        assert!(error.to_string().contains("--sdk-path"), "{error}");
    }
}
