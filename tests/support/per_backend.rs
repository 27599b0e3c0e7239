//! [`per_backend!`]: the one macro that turns `async fn NAME(backend: Backend)` behaviours into
//! one `#[tokio::test]` per database.

/// Instantiates each listed behaviour of the calling module — an `async fn NAME(backend: Backend)`
/// in scope there — as one `#[tokio::test]` per backend, in one child module per backend:
///
/// ```ignore
/// support::per_backend!(claim_honours_limit, claim_writes_the_lease);
/// // → sqlite::claim_honours_limit, mysql::claim_honours_limit, postgres::claim_honours_limit, …
///
/// support::per_backend!([mysql, postgres] => claim_branches_read_only_what_they_return);
/// // → only the listed backends (`sqlite`, `mysql`, `postgres`), for behaviours that exist only
/// //   on some databases (e.g. EXPLAIN plans)
/// ```
///
/// `cargo nextest run -E 'test(/::mysql::/)'` then runs one backend. Each test runs on a two-thread runtime
/// (`flavor = "multi_thread", worker_threads = 2`), so behaviours that race workers really race.
/// A behaviour missing from the list is never called and shows up as an unused-function warning.
/// The test binary mounts this module at its root (`mod support;` in `tests/main.rs`): the
/// expansion names `$crate::support::Backend`.
#[allow(unused_macros)] // not every test binary has per-backend tests
macro_rules! per_backend {
    ([$($backend:ident),+ $(,)?] => $($behaviour:ident),+ $(,)?) => {
        $crate::support::per_backend!(@modules [$($backend),+] [$($behaviour),+]);
    };
    ($($behaviour:ident),+ $(,)?) => {
        $crate::support::per_backend!([sqlite, mysql, postgres] => $($behaviour),+);
    };
    (@modules [$($backend:ident),+] $behaviours:tt) => {
        $($crate::support::per_backend!(@module $backend $behaviours);)+
    };
    (@module $backend:ident [$($behaviour:ident),+]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    super::$behaviour($crate::support::per_backend!(@backend $backend)).await;
                }
            )+
        }
    };
    (@backend sqlite) => { $crate::support::Backend::Sqlite };
    (@backend mysql) => { $crate::support::Backend::MySql };
    (@backend postgres) => { $crate::support::Backend::Postgres };
}

#[allow(unused_imports)] // not every test binary has per-backend tests
pub(crate) use per_backend;
