//! The bundled signers against their platforms' own verifiers (Stripe's library, Octokit's).

use super::*;

//
// `scripts/install-verifiers.sh` installs them into `target/verifiers/`. Without them these
// tests say SKIPPED (on the terminal, past the test harness's capture) and pass, unless
// HOOKGATE_TEST_VERIFIERS=required, when they fail.

/// `target/verifiers/` of the gateway's workspace.
fn verifiers_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/verifiers")
}

/// Says that a verifier is missing: a failure when CI requires verifiers, else a visible skip.
fn verifier_missing(test: &str, what: &str) {
    let required = std::env::var("HOOKGATE_TEST_VERIFIERS").is_ok_and(|v| v == "required");
    assert!(
        !required,
        "{test}: {what} is not installed and HOOKGATE_TEST_VERIFIERS=required; run scripts/install-verifiers.sh"
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {what} is not installed (run scripts/install-verifiers.sh)"
    );
}

/// The current time in ms: the official verifiers refuse signatures older than five minutes.
fn real_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs a verifier program; its exit status and output.
fn run_verifier(command: &mut std::process::Command) -> (bool, String) {
    let out = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const STRIPE_VERIFY: &str = r#"
import sys, stripe
payload, header, secret = sys.argv[1:4]
event = stripe.Webhook.construct_event(payload, header, secret)
print("verified", event["id"])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripes_own_library_accepts_the_stripe_signers_signatures() {
    let python = verifiers_dir().join("venv/bin/python");
    let has_stripe = python.exists()
        && std::process::Command::new(&python)
            .args(["-c", "import stripe"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_stripe {
        return verifier_missing("stripe signer", "the `stripe` Python package");
    }
    let f = host_with(&["stripe-signature"]);
    let body = r#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"order.created"}"#;
    // Secrets of the shape Stripe issues, used whole; and a rotation to a plain one.
    let newest = "whsec_8mLhSH2zMWSrD3Hk4P1JGkl0ZqAEiUgC";
    let older = "an-older-plain-secret";
    let mut input = sign_input(body.as_bytes(), &[newest, older]);
    input.now_ms = real_now_ms();
    let headers = f
        .host
        .sign(&binding("stripe-signature", &[]), input)
        .await
        .unwrap();
    let signature = header(&headers, "Stripe-Signature").unwrap();
    for secret in [newest, older] {
        let (ok, text) = run_verifier(std::process::Command::new(&python).args([
            "-c",
            STRIPE_VERIFY,
            body,
            signature,
            secret,
        ]));
        assert!(ok && text.contains("verified evt_1NG8"), "{secret}: {text}");
    }
    let (ok, text) = run_verifier(std::process::Command::new(&python).args([
        "-c",
        STRIPE_VERIFY,
        body,
        signature,
        "whsec_someoneElsesSecret0000000000000",
    ]));
    assert!(!ok, "a wrong secret verified: {text}");
}

const GITHUB_VERIFY: &str = r#"
import { verify } from "@octokit/webhooks-methods";
const [secret, payload, signature] = process.argv.slice(1);
const ok = await verify(secret, payload, signature);
console.log(ok ? "verified" : "refused");
process.exit(ok ? 0 : 1);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn octokits_verifier_accepts_the_github_signers_signatures() {
    let node_dir = verifiers_dir().join("node");
    if !node_dir.join("node_modules/@octokit/webhooks-methods").exists() {
        return verifier_missing("github signer", "`@octokit/webhooks-methods` (npm)");
    }
    let f = host_with(&["github-signature"]);
    let body = r#"{"action":"opened","number":1}"#;
    for secret in ["It's a Secret to Everybody", "whsec_c2VjcmV0LWtleS1ieXRlcw=="] {
        let headers = f
            .host
            .sign(
                &binding("github-signature", &[]),
                sign_input(body.as_bytes(), &[secret]),
            )
            .await
            .unwrap();
        let signature = header(&headers, "X-Hub-Signature-256").unwrap();
        let node = |secret: &str| {
            let mut command = std::process::Command::new("node");
            command.current_dir(&node_dir).args([
                "--input-type=module",
                "-e",
                GITHUB_VERIFY,
                secret,
                body,
                signature,
            ]);
            run_verifier(&mut command)
        };
        let (ok, text) = node(secret);
        assert!(ok && text.contains("verified"), "{secret}: {text}");
        let (ok, text) = node("not the secret");
        assert!(!ok && text.contains("refused"), "{text}");
    }
}
