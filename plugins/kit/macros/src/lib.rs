//! The attributes of `hookgate-plugin`. Each keeps the function as written and adds the
//! world's `Guest` implementation, which calls it, and the component export. No parser
//! crate: all an attribute needs is the function's name.

use proc_macro::{TokenStream, TokenTree};

/// A transform: `fn(EndpointInfo, EventInfo, DeliveryInfo, &Message) -> Result<Outcome, PluginError>`.
#[proc_macro_attribute]
pub fn transform(_attr: TokenStream, item: TokenStream) -> TokenStream {
    glue(
        item,
        "transformer",
        "fn transform(endpoint: EndpointInfo, event: EventInfo, delivery: DeliveryInfo, message: &OutgoingMessage) \
         -> Result<Outcome, PluginError> { NAME(endpoint, event, delivery, &Message::lent(message)) }",
    )
}

/// A signer: `fn(EndpointInfo, DeliveryInfo, &Message, &SigningKey) -> Result<Edits, PluginError>`.
#[proc_macro_attribute]
pub fn sign(_attr: TokenStream, item: TokenStream) -> TokenStream {
    glue(
        item,
        "signer",
        "fn sign(endpoint: EndpointInfo, delivery: DeliveryInfo, message: &OutgoingMessage, key: &SigningKey) \
         -> Result<Edits, PluginError> { NAME(endpoint, delivery, &Message::lent(message), key) }",
    )
}

/// A backoff function: `fn(RetryContext) -> Result<Decision, PluginError>`.
#[proc_macro_attribute]
pub fn backoff(_attr: TokenStream, item: TokenStream) -> TokenStream {
    glue(
        item,
        "backoff",
        "fn next_delay(context: RetryContext) -> Result<Decision, PluginError> { NAME(context) }",
    )
}

/// `item`, then the `Guest` implementation of `world` whose one method is `method` calling
/// the function, then the export.
fn glue(item: TokenStream, world: &str, method: &str) -> TokenStream {
    let Some(name) = function_name(&item) else {
        return r#"compile_error!("a hookgate plugin attribute goes on a function");"#
            .parse()
            .expect("a valid error");
    };
    let method = method.replace("NAME", &name);
    let glue = format!(
        "#[doc(hidden)]
        #[allow(clippy::too_many_arguments)]
        mod __hookgate_plugin {{
            use ::hookgate_plugin::{world}::*;
            pub struct Plugin;
            impl Guest for Plugin {{ {method} }}
            use super::{name};
            ::hookgate_plugin::{world}::__export_{world}!(Plugin);
        }}"
    );
    let mut out = item;
    out.extend(glue.parse::<TokenStream>().expect("the glue is valid Rust"));
    out
}

/// The identifier after `fn`.
fn function_name(item: &TokenStream) -> Option<String> {
    let mut tokens = item.clone().into_iter();
    while let Some(token) = tokens.next() {
        if let TokenTree::Ident(ident) = &token
            && ident.to_string() == "fn"
        {
            return match tokens.next() {
                Some(TokenTree::Ident(name)) => Some(name.to_string()),
                _ => None,
            };
        }
    }
    None
}
