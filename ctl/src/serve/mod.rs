//! `serve`: the live dashboard. One HTTP server ([axum], already in the dependency tree
//! through tonic) with:
//!
//! - `GET /` and its assets (`/app.js`, `/style.css`), embedded in the binary: a page that
//!   polls the API below and redraws without reloading (charts on `<canvas>`, no framework);
//! - `GET /api/status`: the JSON of `percolator-ctl status --json`, read at the request;
//! - `GET /api/history`: the charts' samples ([`history`]), read by a sampler every
//!   [`ServeConfig::sample_every`];
//! - `GET /api/dead-letters`: the JSON of `dead-letters list --json`;
//! - `GET /metrics`: the status gauges as Prometheus metrics ([`prom`]), also on
//!   [`ServeConfig::metrics_addr`] (`--metrics-addr`) through `percolator-metrics`;
//! - `POST /api/dead-letters/prepare` and `/confirm`: the only writes, in two steps with a
//!   confirmation token ([`actions`]). Both take JSON only (`content-type:
//!   application/json`), which a cross-site form cannot send.
//!
//! Every route is behind [`guard`]: a `Host` that is not the dashboard's address, localhost
//! or an `--allow-host` name is refused (DNS rebinding), so is a `POST` whose `Origin` is not
//! that `Host`; responses forbid framing; slow clients time out.

pub mod actions;
pub mod guard;
pub mod history;
pub mod prom;
pub mod reload;

use crate::cli::{DeadLetterCommand, StoreArgs};
use crate::verbs::{dead_letters::dead_letters, status::status};
use crate::CtlError;
use actions::{Action, Confirmations};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use history::History;
use percolator::Client;
use reload::CurrentClient;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The dashboard's settings.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// How often the sampler reads the charts' figures.
    pub sample_every: Duration,
    /// Samples kept.
    pub history: usize,
    /// Also serve `/metrics` (only) on this address, as every long-running binary does.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `Host` names answered besides the listen address and localhost
    /// ([`guard::HostPolicy`]).
    pub allowed_hosts: Vec<String>,
    /// How long a connection may take to send a request's headers before it is closed.
    pub header_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            sample_every: Duration::from_secs(2),
            history: 300,
            metrics_addr: None,
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
        }
    }
}

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

struct App {
    /// The client of this moment ([`reload`]: rebuilt when the table ids change).
    client: CurrentClient,
    store: StoreArgs,
    config: ServeConfig,
    history: Mutex<History>,
    /// The sampler's last error (a store or oracle outage), shown on the page.
    last_error: Mutex<Option<String>>,
    confirmations: Confirmations,
}

/// Serves the dashboard on `listener` until `shutdown` resolves. Reads the store through
/// `client` (as `percolator-ctl status` does, with `store`'s liveness horizon and oracle
/// namespace). When the namespace's table ids change under it (an application started
/// after it on a new store), it goes on with a client keyed by the new map ([`reload`]).
pub async fn serve(
    client: Client,
    store: StoreArgs,
    config: ServeConfig,
    listener: std::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), CtlError> {
    let listen = listener.local_addr().map_err(serve_error)?;
    if !listen.ip().is_loopback() {
        tracing::warn!(
            %listen,
            "the dashboard listens on an address that is not loopback: anyone who can reach it \
             reads the store's status and can replay or drop dead letters (there is no \
             authentication); listen on 127.0.0.1 or put an authenticating proxy in front"
        );
    }
    let policy = Arc::new(guard::HostPolicy::new(listen, config.allowed_hosts.clone()));
    let header_timeout = config.header_timeout;
    let client = CurrentClient::new(client);
    let app = Arc::new(App {
        client: client.clone(),
        store,
        history: Mutex::new(History::new(config.history)),
        config,
        last_error: Mutex::new(None),
        confirmations: Confirmations::default(),
    });
    let render = metrics_render(client.clone(), app.store.clone());
    let endpoint = match app.config.metrics_addr {
        Some(addr) => Some(
            percolator_metrics::spawn(addr, render.clone())
                .map_err(serve_error)?
                .1,
        ),
        None => None,
    };
    let sampler = tokio::spawn(sample(app.clone()));
    let watcher = tokio::spawn(reload::watch(client, app.config.sample_every));
    let router = Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/api/status", get(api_status))
        .route("/api/history", get(api_history))
        .route("/api/dead-letters", get(api_dead_letters))
        .route("/api/dead-letters/prepare", post(api_prepare))
        .route("/api/dead-letters/confirm", post(api_confirm))
        .with_state(app)
        .merge(percolator_metrics::router(render.clone()))
        .layer(axum::middleware::from_fn_with_state(policy, guard::guard));
    listener.set_nonblocking(true).map_err(serve_error)?;
    let result = axum::Server::from_tcp(listener)
        .map_err(serve_error)?
        .http1_header_read_timeout(header_timeout)
        .serve(router.into_make_service())
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(serve_error);
    watcher.abort();
    sampler.abort();
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    result
}

fn serve_error(e: impl std::error::Error + Send + Sync + 'static) -> CtlError {
    CtlError::Serve(Box::new(e))
}

/// Reads the charts' figures every `sample_every`, for as long as the server runs.
async fn sample(app: Arc<App>) {
    let mut tick = tokio::time::interval(app.config.sample_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match status(&app.client.get(), &app.store).await {
            Ok(answer) => {
                let t = history::now_ms();
                app.history
                    .lock()
                    .expect("history lock")
                    .record(t, &answer.json);
                *app.last_error.lock().expect("error lock") = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "dashboard sample failed");
                *app.last_error.lock().expect("error lock") = Some(e.to_string());
            }
        }
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

fn error_response(e: &CtlError) -> Response {
    let code = match e {
        CtlError::Usage(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    json_response(code, &json!({"error": e.to_string()}))
}

async fn api_status(State(app): State<Arc<App>>) -> Response {
    match status(&app.client.get(), &app.store).await {
        Ok(answer) => json_response(StatusCode::OK, &answer.json),
        Err(e) => error_response(&e),
    }
}

async fn api_history(State(app): State<Arc<App>>) -> Response {
    let samples: Vec<Value> = app
        .history
        .lock()
        .expect("history lock")
        .samples()
        .map(history::Sample::json)
        .collect();
    let error = app.last_error.lock().expect("error lock").clone();
    json_response(
        StatusCode::OK,
        &json!({
            "sample_ms": app.config.sample_every.as_millis() as u64,
            "samples": samples,
            "error": error,
            // Not in the store: see `history`'s documentation.
            "latency_available": false,
        }),
    )
}

async fn api_dead_letters(State(app): State<Arc<App>>) -> Response {
    match dead_letters(&app.client.get(), &DeadLetterCommand::List).await {
        Ok(answer) => json_response(StatusCode::OK, &answer.json),
        Err(e) => error_response(&e),
    }
}

/// `/metrics`: the status read at each scrape ([`prom::render`]); a store that cannot be
/// read answers 503.
fn metrics_render(client: CurrentClient, store: StoreArgs) -> percolator_metrics::Render {
    Arc::new(move || {
        let (client, store) = (client.get(), store.clone());
        Box::pin(async move {
            status(&client, &store)
                .await
                .map(|answer| prom::render(&answer.json))
                .map_err(|e| e.to_string())
        })
    })
}

/// The JSON body of a POST, which must say it is JSON; else the response refusing it.
fn json_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, Box<Response>> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return Err(Box::new(json_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &json!({"error": "content-type must be application/json"}),
        )));
    }
    serde_json::from_slice(body).map_err(|e| {
        Box::new(json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("body: {e}")}),
        ))
    })
}

async fn api_prepare(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match json_body(&headers, &body) {
        Ok(v) => v,
        Err(response) => return *response,
    };
    let Some(action) = request["action"].as_str().and_then(Action::parse) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "action must be \"replay\" or \"drop\""}),
        );
    };
    let all = request["all"].as_bool() == Some(true);
    let id = request["id"].as_str();
    if all == id.is_some() {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "give either \"id\" or \"all\": true"}),
        );
    }
    match app
        .confirmations
        .prepare(&app.client.get(), action, id, all)
        .await
    {
        Ok(prepared) => json_response(StatusCode::OK, &prepared),
        Err(e) => error_response(&e),
    }
}

async fn api_confirm(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match json_body(&headers, &body) {
        Ok(v) => v,
        Err(response) => return *response,
    };
    let Some(token) = request["token"].as_str() else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "\"token\" missing: prepare the action first"}),
        );
    };
    match app.confirmations.confirm(&app.client.get(), token).await {
        Ok(answers) => json_response(
            StatusCode::OK,
            &json!({"done": answers.into_iter().map(|a| a.json).collect::<Vec<_>>()}),
        ),
        Err(e) => error_response(&e),
    }
}
