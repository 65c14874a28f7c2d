//! Runs a JavaScript transformation written the way Svix's transformations are:
//!
//! ```js
//! function handler(webhook) {
//!   webhook.payload = { wrapped: webhook.payload };
//!   webhook.headers["x-shop"] = "eu";
//!   webhook.method = "PUT";
//!   return webhook;
//! }
//! ```
//!
//! `webhook` has `eventType`, `payload` (the body parsed as JSON, or its text when it is not
//! JSON), `url` (read-only), `method` (`POST`), `headers` (lower-case names; repeated headers
//! joined with `, `) and `cancel` (`false`). The handler returns it, changed: `cancel` set to
//! `true` (or to a string, the reason) drops the delivery; otherwise the payload is sent back as
//! JSON (a text payload of a non-JSON body as the text), with the returned headers, and a
//! `method` other than `POST` as the `hookgate-method` header the gateway turns into the
//! request's method. The headers the handler returns are the request's headers: the answer
//! removes every header it was lent and sets the returned ones.
//!
//! The handler sees the whole request, so the headers (as one block) and the body are read
//! from the host once per call.
//!
//! Config: `code` — the JavaScript. A `.js` file in the plugin folder is this plugin with the
//! file as its `code`.
//!
//! The engine is Boa, pure Rust. The code is compiled once per instance and kept, with its
//! JavaScript realm, for the next call of the same binding on that instance (the gateway reuses
//! instances of a binding; see `wit/plugin.wit`). So what a handler leaves in globals may be
//! seen by a later call, or not.

wit_bindgen::generate!({ world: "transformer", path: "../../wit" });

use std::cell::RefCell;

use boa_engine::{Context, JsError, JsObject, JsString, JsValue, Script, Source, js_string};
use hookgate::plugin::config;

struct Js;

/// The glue between the host's request and the user's handler: builds the `webhook` object,
/// calls the handler, and answers `[cancel reason or null, method, headers as JSON, body]`.
/// Evaluated before the user's code, so it holds the original `JSON` functions.
const GLUE: &str = r#"
(function () {
  const parse = JSON.parse, stringify = JSON.stringify, keys = Object.keys;
  const own = Object.prototype.hasOwnProperty, define = Object.defineProperty;
  return function (handler, eventType, url, body, headerJson) {
    let payload = body, isJson = true;
    try { payload = parse(body); } catch (e) { isJson = false; }
    const headers = {};
    for (const [name, value] of parse(headerJson)) {
      const key = name.toLowerCase();
      headers[key] = own.call(headers, key) ? headers[key] + ", " + value : value;
    }
    const webhook = { eventType, payload, method: "POST", headers, cancel: false };
    define(webhook, "url", { value: url, enumerable: true, writable: false });
    const out = handler(webhook);
    if (out === null || typeof out !== "object") {
      throw new TypeError("handler(webhook) must return the webhook, not " + (out === null ? "null" : typeof out));
    }
    if (out.cancel) {
      return [typeof out.cancel === "string" ? out.cancel : "cancelled by the JavaScript transformation", "", "", ""];
    }
    const answered = [];
    const outHeaders = out.headers == null ? {} : out.headers;
    for (const name of keys(outHeaders)) {
      const value = outHeaders[name];
      if (value !== undefined && value !== null) answered.push([name, String(value)]);
    }
    const method = out.method === undefined ? "POST" : String(out.method).toUpperCase();
    const text = !isJson && typeof out.payload === "string" ? out.payload
      : stringify(out.payload === undefined ? null : out.payload);
    return [null, method, stringify(answered), text];
  };
})()
"#;

/// The user's code, compiled into its own realm, with the glue and the handler found in it.
struct Compiled {
    code: String,
    context: Context,
    glue: JsObject,
    handler: JsObject,
}

thread_local! {
    /// The compiled code of this instance. An instance serves one binding, so one `code`.
    static COMPILED: RefCell<Option<Compiled>> = const { RefCell::new(None) };
}

impl Guest for Js {
    fn transform(
        endpoint: EndpointInfo,
        event: EventInfo,
        _delivery: DeliveryInfo,
        message: &OutgoingMessage,
    ) -> Result<Outcome, PluginError> {
        let code = config::get("code").ok_or_else(|| {
            error(
                "bad_config",
                "the js plugin needs its JavaScript in config key `code`".into(),
            )
        })?;
        COMPILED.with_borrow_mut(|slot| {
            if slot.as_ref().is_none_or(|compiled| compiled.code != code) {
                *slot = Some(compile(code)?);
            }
            let compiled = slot.as_mut().expect("compiled above");
            let outcome = run(compiled, &endpoint, &event, message);
            // Collect the call's garbage now: left to Boa's threshold, the heap grows past the
            // host's reuse limit within a few hundred calls, and the host then drops the
            // instance, so the code would be parsed again. Measured: no dearer per call.
            boa_engine::gc::force_collect();
            outcome
        })
    }
}

/// Compiles `code` and finds its `handler` function.
fn compile(code: String) -> Result<Compiled, PluginError> {
    let mut context = Context::default();
    let glue = context
        .eval(Source::from_bytes(GLUE))
        .map_err(|e| error("js_glue", e.to_string()))?
        .as_object()
        .ok_or_else(|| error("js_glue", "the glue is not a function".into()))?;
    let script = Script::parse(Source::from_bytes(code.as_str()), None, &mut context)
        .map_err(|e| error("bad_config", format!("the JavaScript does not parse: {e}")))?;
    script
        .evaluate(&mut context)
        .map_err(|e| error("js_error", thrown(e, &mut context)))?;
    let handler = context
        .global_object()
        .get(js_string!("handler"), &mut context)
        .map_err(|e| error("js_error", thrown(e, &mut context)))?
        .as_callable()
        .ok_or_else(|| {
            error(
                "bad_config",
                "the JavaScript defines no function `handler(webhook)`".into(),
            )
        })?;
    Ok(Compiled {
        code,
        context,
        glue,
        handler,
    })
}

/// Calls the handler with one request and turns its answer into an outcome.
fn run(
    compiled: &mut Compiled,
    endpoint: &EndpointInfo,
    event: &EventInfo,
    message: &OutgoingMessage,
) -> Result<Outcome, PluginError> {
    let block = message.header_block();
    let lent = header_lines(&block);
    let headers: Vec<(&str, String)> = lent
        .iter()
        .map(|(name, value)| (*name, String::from_utf8_lossy(value).into_owned()))
        .collect();
    let body = message.body();
    let header_json = serde_json::to_string(&headers).map_err(|e| error("encode", e.to_string()))?;
    let args = [
        JsValue::from(compiled.handler.clone()),
        JsValue::from(JsString::from(event.event_type.as_str())),
        JsValue::from(JsString::from(endpoint.url.as_str())),
        JsValue::from(JsString::from(String::from_utf8_lossy(&body).as_ref())),
        JsValue::from(JsString::from(header_json.as_str())),
    ];
    let context = &mut compiled.context;
    let answer = compiled
        .glue
        .call(&JsValue::undefined(), &args, context)
        .map_err(|e| error("js_error", thrown(e, context)))?;
    let answer = answer
        .as_object()
        .ok_or_else(|| error("js_glue", "the glue answered no array".into()))?;
    let mut field = |index: u32| -> Result<JsValue, PluginError> {
        answer
            .get(index, context)
            .map_err(|e| error("js_glue", e.to_string()))
    };
    if let Some(reason) = field(0)?.as_string() {
        return Ok(Outcome::Drop(text(&reason)));
    }
    let method = text(&field(1)?.as_string().unwrap_or_default());
    let header_json = text(&field(2)?.as_string().unwrap_or_default());
    let body = text(&field(3)?.as_string().unwrap_or_default());
    let mut set_headers: Vec<(String, Vec<u8>)> = serde_json::from_str::<Vec<(String, String)>>(&header_json)
        .map_err(|e| error("js_glue", e.to_string()))?
        .into_iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("hookgate-method"))
        .map(|(name, value)| (name, value.into_bytes()))
        .collect();
    if method != "POST" {
        set_headers.push(("hookgate-method".into(), method.into_bytes()));
    }
    Ok(Outcome::Forward(Edits {
        remove_headers: lent.iter().map(|(name, _)| (*name).to_owned()).collect(),
        set_headers,
        body: Some(body.into_bytes()),
    }))
}

/// The (name, value) pairs of a header block (`name: value\r\n` lines, names in lower case).
fn header_lines(block: &[u8]) -> Vec<(&str, &[u8])> {
    block
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|b| *b == b':')?;
            let name = std::str::from_utf8(&line[..colon]).ok()?;
            let value = &line[colon + 1..];
            Some((name, value.strip_prefix(b" ").unwrap_or(value)))
        })
        .collect()
}

/// What a JavaScript exception says: `String(thrown)` for a thrown value (`Error: boom`),
/// the engine's words for its own errors.
fn thrown(e: JsError, context: &mut Context) -> String {
    match e.as_opaque() {
        Some(value) => value
            .to_string(context)
            .map(|s| text(&s))
            .unwrap_or_else(|_| e.to_string()),
        None => e.to_string(),
    }
}

/// A JavaScript string as Rust text; lone surrogates become U+FFFD.
fn text(s: &JsString) -> String {
    s.to_std_string_lossy()
}

fn error(code: &str, message: String) -> PluginError {
    PluginError {
        code: code.into(),
        message,
    }
}

export!(Js);
