//! Polling with a deadline: tests wait for a condition, never for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::bail;

/// How often conditions are re-checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Polls `condition` until it holds, for at most `timeout`. `what` names the condition in the error.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    wait_for(timeout, what, || condition().then_some(()))
}

/// Polls `probe` until it returns `Some`, for at most `timeout`, and returns that value.
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`wait_until`] for an async condition; sleeps on the tokio timer between checks.
pub async fn wait_until_async<F, Fut>(
    timeout: Duration,
    what: &str,
    mut condition: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for_async(timeout, what, || {
        let check = condition();
        async move { check.await.then_some(()) }
    })
    .await
}

/// [`wait_for`] for an async probe; sleeps on the tokio timer between checks. A probe that is itself
/// slow is not interrupted: the deadline is checked between calls.
pub async fn wait_for_async<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut probe: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_once_the_condition_holds() {
        let mut calls = 0;
        wait_until(Duration::from_secs(5), "third call", || {
            calls += 1;
            calls == 3
        })
        .expect("holds");
        assert_eq!(calls, 3);
    }

    #[test]
    fn wait_for_times_out_with_the_condition_named() {
        let started = Instant::now();
        let err =
            wait_for::<()>(Duration::from_millis(100), "never", || None).expect_err("times out");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(err.to_string().contains("waiting for never"), "{err}");
    }

    #[tokio::test]
    async fn async_variants_poll_and_time_out() {
        let mut calls = 0;
        let value = wait_for_async(Duration::from_secs(5), "second call", || {
            calls += 1;
            let n = calls;
            async move { (n == 2).then_some(n) }
        })
        .await
        .expect("value");
        assert_eq!(value, 2);
        let err = wait_until_async(Duration::from_millis(50), "nothing", || async { false })
            .await
            .expect_err("times out");
        assert!(err.to_string().contains("waiting for nothing"), "{err}");
    }
}
