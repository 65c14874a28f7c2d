//! The web console at `/console` (README "Console"): static files compiled into the binary —
//! no build step, no CDN, no Node.js — that call the same HTTP API as everyone else, with the
//! user's API key or console token, so a tenant sees in it exactly what its key sees.
//!
//! Plain ES modules and hand-written CSS: the console is a few hundred lines of JavaScript, and
//! a framework with a bundler would cost more (a Node.js toolchain in the build, its upkeep)
//! than it saves. Pages build the DOM with `ui.js`'s `h()`, never from HTML strings, so data
//! can never become markup.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// Every file of the console: its path under `/console/`, content type and bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("assets/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/style.css"),
    ),
    ("app.js", JS, include_bytes!("assets/app.js")),
    ("api.js", JS, include_bytes!("assets/api.js")),
    ("ui.js", JS, include_bytes!("assets/ui.js")),
    ("views/signin.js", JS, include_bytes!("assets/views/signin.js")),
    (
        "views/overview.js",
        JS,
        include_bytes!("assets/views/overview.js"),
    ),
    (
        "views/ordering.js",
        JS,
        include_bytes!("assets/views/ordering.js"),
    ),
    (
        "views/endpoints.js",
        JS,
        include_bytes!("assets/views/endpoints.js"),
    ),
    (
        "views/endpoint.js",
        JS,
        include_bytes!("assets/views/endpoint.js"),
    ),
    (
        "views/event_types.js",
        JS,
        include_bytes!("assets/views/event_types.js"),
    ),
    (
        "views/deliveries.js",
        JS,
        include_bytes!("assets/views/deliveries.js"),
    ),
    ("views/catalog.js", JS, include_bytes!("assets/views/catalog.js")),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("assets/favicon.svg"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

/// Scripts and styles from the console itself only; images may be inline SVG.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes; they need no key (the files hold no data).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/", get(|| async { serve("index.html") }))
        .route(
            "/console/{*file}",
            get(|Path(file): Path<String>| async move { serve(&file) }),
        )
}

fn serve(file: &str) -> Response {
    let Some((_, content_type, bytes)) = ASSETS.iter().find(|(path, _, _)| *path == file) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut response = (*bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Small files, and a new gateway version may change them: revalidate every time.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_a_script_imports_is_served() {
        for (path, content_type, bytes) in ASSETS {
            if *content_type != JS {
                continue;
            }
            let text = std::str::from_utf8(bytes).unwrap();
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let Some(spec) = line.split(['\'', '"']).nth(1) else {
                    continue;
                };
                let mut parts: Vec<&str> = if dir.is_empty() {
                    Vec::new()
                } else {
                    dir.split('/').collect()
                };
                for segment in spec.split('/') {
                    match segment {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let target = parts.join("/");
                assert!(
                    ASSETS.iter().any(|(p, _, _)| *p == target),
                    "{path} imports {spec} ({target}), which is not served"
                );
            }
        }
    }
}
