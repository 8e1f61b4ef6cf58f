//! The layers experiment's user endpoint in Rust, the native ceiling of `bench layers`.
//!
//! POST / with `{"id": 1, "name": "user", "email": "user@email.com"}`: serde decodes the body
//! into a `User`, copies it into a new `User` and encodes it back as `application/json`, the
//! same work `apps/user.py` does with msgspec. A body that is not JSON gets 400, JSON of the
//! wrong shape gets 422 (axum's `Json` extractor rejections), each with a JSON error body.
//!
//! The runtime is tokio's `current_thread` flavour: one thread runs every connection, so the
//! row is a one-core ceiling beside the one-process Python servers it is compared with.
//!
//! Usage: `axum-user --host 127.0.0.1 --port 8000`; SIGTERM or Ctrl-C stops it.

use axum::{
    extract::rejection::JsonRejection,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
    Json, Router,
};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize)]
struct User {
    id: i64,
    name: String,
    email: String,
}

async fn echo_user(payload: Result<Json<User>, JsonRejection>) -> Response {
    match payload {
        Ok(Json(user)) => {
            let copy = User { id: user.id, name: user.name.clone(), email: user.email.clone() };
            Json(copy).into_response()
        }
        Err(rejection) => {
            let status = match rejection {
                JsonRejection::JsonDataError(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::BAD_REQUEST,
            };
            let body = serde_json::json!({ "error": rejection.body_text() });
            (status, Json(body)).into_response()
        }
    }
}

fn parse_args() -> (String, u16) {
    let mut host = String::from("127.0.0.1");
    let mut port: u16 = 8000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| {
            eprintln!("error: {flag} needs a value");
            std::process::exit(2);
        });
        match flag.as_str() {
            "--host" => host = value,
            "--port" => {
                port = value.parse().unwrap_or_else(|_| {
                    eprintln!("error: --port must be a number, got {value}");
                    std::process::exit(2);
                })
            }
            _ => {
                eprintln!("error: unknown flag {flag} (use --host and --port)");
                std::process::exit(2);
            }
        }
    }
    (host, port)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (host, port) = parse_args();
    let app = Router::new().route("/", post(echo_user));
    let listener = match tokio::net::TcpListener::bind((host.as_str(), port)).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("error: cannot listen on {host}:{port}: {err}");
            std::process::exit(1);
        }
    };
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await.expect("serve");
}
