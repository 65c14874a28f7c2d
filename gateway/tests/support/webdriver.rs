//! A headless Chromium driven over the W3C WebDriver protocol (chromedriver), for the console's
//! browser tests. The protocol is a handful of JSON-over-HTTP calls, so this speaks it with the
//! tests' own HTTP client rather than pulling a WebDriver crate (and its dependencies) into
//! the build.
//!
//! Without Chromium (`/usr/bin/chromium`, or `HOOKGATE_TEST_CHROMIUM`) and chromedriver (on the
//! `PATH`, or `HOOKGATE_TEST_CHROMEDRIVER`), [`Browser::start`] says that the test was skipped
//! and answers None; with `HOOKGATE_TEST_BROWSER_REQUIRED=1` (set by CI) it fails instead.
//! `HOOKGATE_CONSOLE_SCREENSHOTS=DIR` saves each [`Browser::screenshot`] there as PNG.
//!
//! Screenshots alone let `[object Object]` ship in a table cell: every time a page shows what
//! a test waits for ([`Browser::find`], [`Browser::wait_for_text`]) and before a screenshot,
//! the page's visible text (and its hover titles and labels) is read and the test fails on
//! what a script leaks when it renders a value wrongly: `[object Object]`, `undefined`, `NaN`,
//! `Invalid Date`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The W3C name of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a wait for something on the page lasts.
const PATIENCE: Duration = Duration::from_secs(15);

pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`
    session: String,
    driver: Child,
}

fn executable(env: &str, default: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path));
    }
    let candidates = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(default))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/bin").join(default)])
        .find(|p| p.is_file())
}

impl Browser {
    /// A fresh headless browser with a `width`×`height` window, or None (after saying so)
    /// when Chromium or chromedriver is missing.
    pub async fn start(width: u32, height: u32) -> Option<Browser> {
        let (Some(chromium), Some(chromedriver)) = (
            executable("HOOKGATE_TEST_CHROMIUM", "chromium"),
            executable("HOOKGATE_TEST_CHROMEDRIVER", "chromedriver"),
        ) else {
            assert!(
                std::env::var_os("HOOKGATE_TEST_BROWSER_REQUIRED").is_none(),
                "HOOKGATE_TEST_BROWSER_REQUIRED is set but chromium or chromedriver is missing \
                 (apt-get install chromium chromium-driver)"
            );
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {}: needs chromium and chromedriver (apt-get install chromium chromium-driver)",
                std::thread::current().name().unwrap_or("a browser test")
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // One language, so that digit grouping (1,234) reads the same everywhere.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--no-first-run", "--disable-extensions", "--lang=en-US",
                         format!("--window-size={width},{height}")],
                "prefs": {"intl.accept_languages": "en-US"},
            },
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"))
            .to_owned();
        Some(Browser {
            http,
            session: format!("{base}/session/{id}"),
            driver,
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn find(&self, css: &str) -> Element<'_> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self
                .call(
                    reqwest::Method::POST,
                    "/element",
                    Some(json!({"using": "css selector", "value": css})),
                )
                .await;
            if let Some(id) = found[ELEMENT].as_str() {
                self.assert_readable().await;
                return Element {
                    browser: self,
                    id: id.to_owned(),
                };
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` on the page; it shows:\n{}",
                self.page_text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether an element matches `css` now.
    pub async fn has(&self, css: &str) -> bool {
        let found = self
            .call(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found.as_array().is_some_and(|a| !a.is_empty())
    }

    /// Waits until the page's text contains `text`.
    pub async fn wait_for_text(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let page = self.page_text().await;
            if page.contains(text) {
                self.assert_readable().await;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed `{text}`; it shows:\n{page}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn page_text(&self) -> String {
        self.execute("return document.body.innerText", json!([]))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// What a reader sees on the page: its visible text, and the hover titles and accessible
    /// labels of its elements (chart bars, times), one per line.
    pub async fn readable_text(&self) -> String {
        self.execute(
            "const labels = [...document.querySelectorAll('[title], [aria-label]')] \
               .flatMap((e) => [e.getAttribute('title'), e.getAttribute('aria-label')]) \
               .filter(Boolean); \
             for (const t of document.querySelectorAll('svg title')) labels.push(t.textContent); \
             return [document.body.innerText, ...labels].join('\\n');",
            json!([]),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Fails when the page reads `[object Object]`, `undefined`, `NaN` or `Invalid Date`.
    pub async fn assert_readable(&self) {
        let text = self.readable_text().await;
        if let Some(leak) = rendering_leak(&text) {
            panic!("the page shows `{leak}`:\n{text}");
        }
    }

    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await;
    }

    /// Types `text` into the field `css` after clearing it.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        element.clear().await;
        element.send_keys(text).await;
    }

    /// Sets a field's value the way a picker would (date inputs take no typing in all
    /// locales), and tells the page it changed.
    pub async fn set_value(&self, css: &str, value: &str) {
        self.find(css).await;
        self.execute(
            "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
             e.dispatchEvent(new Event('change', {bubbles: true}));",
            json!([css, value]),
        )
        .await;
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// Accepts the page's `confirm()` dialog that is open now.
    pub async fn accept_dialog(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self
                .call(reqwest::Method::POST, "/alert/accept", Some(json!({})))
                .await;
            if answer.is_null() {
                return;
            }
            assert!(Instant::now() < deadline, "no dialog to accept: {answer}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG of the window as `name.png` in `HOOKGATE_CONSOLE_SCREENSHOTS`, if set, once
    /// the page has been read (see [`Browser::assert_readable`]).
    pub async fn screenshot(&self, name: &str) {
        self.assert_readable().await;
        let Some(dir) = std::env::var_os("HOOKGATE_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(PathBuf::from(dir).join(format!("{name}.png")), bytes).unwrap();
    }

    /// Ends the session (and with it the browser) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = self.http.delete(&self.session).send().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that failed before `close`: chromedriver takes its browser down with it.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    pub async fn click(&self) {
        let answer = self
            .browser
            .call(
                reqwest::Method::POST,
                &format!("/element/{}/click", self.id),
                Some(json!({})),
            )
            .await;
        assert!(answer.is_null(), "click failed: {answer}");
    }

    pub async fn clear(&self) {
        self.browser
            .call(
                reqwest::Method::POST,
                &format!("/element/{}/clear", self.id),
                Some(json!({})),
            )
            .await;
    }

    pub async fn send_keys(&self, text: &str) {
        self.browser
            .call(
                reqwest::Method::POST,
                &format!("/element/{}/value", self.id),
                Some(json!({"text": text})),
            )
            .await;
    }

    pub async fn text(&self) -> String {
        self.browser
            .call(reqwest::Method::GET, &format!("/element/{}/text", self.id), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// The first of the words a script leaks into a page when it renders a value wrongly:
/// `[object Object]` and `Invalid Date` anywhere, `undefined` and `NaN` as words.
pub fn rendering_leak(text: &str) -> Option<&'static str> {
    for leak in ["[object Object]", "Invalid Date"] {
        if text.contains(leak) {
            return Some(leak);
        }
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    for leak in ["undefined", "NaN"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(leak) {
            let start = from + at;
            let end = start + leak.len();
            let before = text[..start].chars().next_back().is_none_or(|c| !word(c));
            let after = text[end..].chars().next().is_none_or(|c| !word(c));
            if before && after {
                return Some(leak);
            }
            from = end;
        }
    }
    None
}

#[test]
fn a_leaked_value_is_found_and_ordinary_words_are_not() {
    assert_eq!(
        rendering_leak("Last error\n[object Object]"),
        Some("[object Object]")
    );
    assert_eq!(rendering_leak("Updated Invalid Date"), Some("Invalid Date"));
    assert_eq!(rendering_leak("Policy: undefined"), Some("undefined"));
    assert_eq!(rendering_leak("NaN ms, 2 min ago"), Some("NaN"));
    assert_eq!(
        rendering_leak("Nancy's undefinedness, SNaNe; 1,234 delivered"),
        None
    );
}
