//! The two databases the store-level tests run on, and the macro that runs each such test on both.

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// `on_both_backends!(a, b)` turns each `async fn a(backend: Backend)` of the calling module into
/// two tests, `sqlite::a` and `postgres::a`; `on_both_backends!(multi_thread: a, b)` runs them on a
/// two-worker runtime (for code that spawns tasks and waits for them).
#[macro_export]
macro_rules! on_both_backends {
    (@emit $attr:meta; $($name:ident),*) => {
        mod sqlite {
            $(
                #[$attr]
                async fn $name() {
                    super::$name($crate::backends::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[$attr]
                async fn $name() {
                    super::$name($crate::backends::Backend::Postgres).await;
                }
            )*
        }
    };
    (multi_thread: $($name:ident),* $(,)?) => {
        $crate::on_both_backends!(
            @emit tokio::test(flavor = "multi_thread", worker_threads = 2); $($name),*
        );
    };
    ($($name:ident),* $(,)?) => {
        $crate::on_both_backends!(@emit tokio::test; $($name),*);
    };
}
