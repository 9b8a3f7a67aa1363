//! `Client::run` with a body that fails with its own error type (`RunError`): conflicts are
//! still retried, the application's own errors are returned at once.

mod common;
use common::*;
use percolator::txn::{RunError, TxnError};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug)]
enum AppError {
    Txn(TxnError),
    Refused(&'static str),
}

impl From<TxnError> for AppError {
    fn from(e: TxnError) -> Self {
        AppError::Txn(e)
    }
}

impl RunError for AppError {
    fn as_txn_error(&self) -> Option<&TxnError> {
        match self {
            AppError::Txn(e) => Some(e),
            AppError::Refused(_) => None,
        }
    }
}

/// The first attempt conflicts at commit (another writer commits the cell after it read
/// it); `run` retries, and the second attempt sees that write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_inside_an_application_error_are_retried() {
    let c = memory_client();
    let attempts = AtomicU32::new(0);
    let result: Result<i64, AppError> = c
        .run(|txn| {
            let (c, attempts) = (c.clone(), &attempts);
            async move {
                let n = num(txn.get(&cell("x")).await?).unwrap_or(0);
                if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                    let other = c.begin().await?;
                    other.set(cell("x"), "10");
                    other.commit().await?;
                }
                txn.set(cell("x"), (n + 1).to_string());
                Ok(n + 1)
            }
        })
        .await;
    assert_eq!(result.expect("retried after the conflict"), 11);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let t = c.begin().await.unwrap();
    assert_eq!(num(t.get(&cell("x")).await.unwrap()), Some(11));
}

/// An error of the application's own is returned as it is, after one attempt, and nothing
/// the body buffered is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_errors_are_returned_at_once() {
    let c = memory_client();
    let attempts = AtomicU32::new(0);
    let result: Result<(), AppError> = c
        .run(|txn| {
            let attempts = &attempts;
            async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                txn.set(cell("y"), "1");
                Err(AppError::Refused("no"))
            }
        })
        .await;
    assert!(matches!(result, Err(AppError::Refused("no"))));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    let t = c.begin().await.unwrap();
    assert_eq!(t.get(&cell("y")).await.unwrap(), None);
}
