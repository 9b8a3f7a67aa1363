//! Typed client errors: no address, and no oracle reachable within the request timeout
//! (as `ClientError::Timeout`, and as `TimestampError::Timeout` through the trait).

use oracle::{ClientConfig, ClientError, OracleClient};
use percolator::{TimestampError, TimestampSource};
use std::time::Duration;

#[tokio::test]
async fn errors_are_typed() {
    assert!(matches!(
        OracleClient::new(vec![], ClientConfig::default()),
        Err(ClientError::NoAddress)
    ));
    // A port nobody listens on.
    let addr = format!("127.0.0.1:{}", oracle::testkit::free_port());
    let config = ClientConfig {
        request_timeout: Duration::from_millis(200),
        retry_backoff: Duration::from_millis(20),
        ..ClientConfig::default()
    };
    let client = OracleClient::new(vec![addr.clone()], config).unwrap();
    match client.get_timestamp().await {
        Err(ClientError::Timeout { last, .. }) => assert!(last.contains(&addr), "{last}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let source: &dyn TimestampSource = &client;
    assert!(matches!(
        source.get_timestamp().await,
        Err(TimestampError::Timeout(_))
    ));
}

#[test]
fn needs_a_runtime() {
    assert!(matches!(
        OracleClient::new(vec!["127.0.0.1:1".into()], ClientConfig::default()),
        Err(ClientError::NoRuntime)
    ));
}
