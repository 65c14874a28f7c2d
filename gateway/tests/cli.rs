//! The real `hookgate` binary's policy, key and packaging commands (README "Command line"):
//! `config check` reports every invalid SNS attribute as `file:line: path: reason`, `policy
//! preview` prints the planned attempts and draws them as SVG, `keygen ed25519` prints a key
//! pair, `--version` names the commit, and completions and the man page cover every command.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The seed's example policy (docs/policies.md, "SNS delivery policies"), once as YAML and once
/// pasted as JSON.
const SEED_POLICIES: &str = r#"policies:
  seed:
    sns:
      healthyRetryPolicy:
        minDelayTarget: 1
        maxDelayTarget: 60
        numRetries: 50
        numNoDelayRetries: 3
        numMinDelayRetries: 2
        numMaxDelayRetries: 35
        backoffFunction: exponential
  seed-json:
    sns: '{"healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 50, "numNoDelayRetries": 3, "numMinDelayRetries": 2, "numMaxDelayRetries": 35, "backoffFunction": "exponential"}}'
"#;

fn hookgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(args)
        .env_remove("HOOKGATE_LOG_FORMAT")
        .env("HOOKGATE_LOG", "error")
        .output()
        .expect("the hookgate binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn config_check_reports_every_invalid_sns_attribute_with_file_line_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "bad.yaml",
        r#"policies:
  fast:
    sns:
      healthyRetryPolicy:
        numRetries: 101
  broken:
    sns:
      healthyRetryPolicy:
        minDelayTarget: 0
        maxDelayTarget: 4000
        numNoDelayRetries: -1
        backoffFunction: cubic
        numRetry: 3
      throttlePolicy:
        maxReceivesPerSecond: 0
      requestPolicy:
        headerContentType: text/html
  too-long:
    sns: {healthyRetryPolicy: {minDelayTarget: 600, maxDelayTarget: 3600, numRetries: 5, numMaxDelayRetries: 5}}
  too-many-phases:
    sns: {healthyRetryPolicy: {numRetries: 3, numNoDelayRetries: 2, numMinDelayRetries: 2}}
  pasted:
    sns: '{"healthyRetryPolicy": {"numRetries": 150}}'
  standard:
    schedule: [0s]
"#,
    );
    let label = file.display().to_string();
    let out = hookgate(&["config", "check", &label]);
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();

    // (line, path, what the reason says)
    let expected = [
        (
            5,
            "policies.fast.sns.healthyRetryPolicy.numRetries",
            "101 is above the maximum 100",
        ),
        (
            9,
            "policies.broken.sns.healthyRetryPolicy.minDelayTarget",
            "0 is below the minimum 1",
        ),
        (
            10,
            "policies.broken.sns.healthyRetryPolicy.maxDelayTarget",
            "4000 is above the maximum 3600",
        ),
        (
            11,
            "policies.broken.sns.healthyRetryPolicy.numNoDelayRetries",
            "-1 is below the minimum 0",
        ),
        (
            12,
            "policies.broken.sns.healthyRetryPolicy.backoffFunction",
            "must be one of linear, arithmetic, geometric, exponential",
        ),
        (
            13,
            "policies.broken.sns.healthyRetryPolicy.numRetry",
            "unknown attribute",
        ),
        (
            15,
            "policies.broken.sns.throttlePolicy.maxReceivesPerSecond",
            "0 is below the minimum 1",
        ),
        (
            17,
            "policies.broken.sns.requestPolicy.headerContentType",
            "must be application/json or text/plain",
        ),
        (
            19,
            "policies.too-long.sns.healthyRetryPolicy",
            "the retries add up to 18000 s, above the 3600 s limit",
        ),
        (
            21,
            "policies.too-many-phases.sns.healthyRetryPolicy",
            "add up to 4, above numRetries 3",
        ),
        // Inside a pasted JSON string the line is the `sns:` key's.
        (
            23,
            "policies.pasted.sns.healthyRetryPolicy.numRetries",
            "150 is above the maximum 100",
        ),
        (24, "policies.standard", "cannot be redefined"),
    ];
    assert_eq!(lines.len(), expected.len(), "{stderr}");
    for (line, (number, path, reason)) in lines.iter().zip(expected) {
        let prefix = format!("{label}:{number}: {path}: ");
        assert!(
            line.starts_with(&prefix) && line[prefix.len()..].contains(reason),
            "expected `{prefix}…{reason}…`, got `{line}`"
        );
    }
    // The issue's own example, verbatim.
    assert_eq!(
        lines[0],
        format!("{label}:5: policies.fast.sns.healthyRetryPolicy.numRetries: 101 is above the maximum 100")
    );
}

#[test]
fn config_check_passes_the_quick_start_config() {
    let quick_start = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/hookgate.yaml");
    let out = hookgate(&["config", "check", quick_start]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.ends_with(
            ": ok (2 topics, the operator topic `ops` and the built-in `svix`; 1 endpoint; 2 policies and the 4 presets)\n"
        ),
        "{stdout}"
    );
}

/// The quick-start config's comment runs each command as the README's quick start does (it
/// once started the sink without the `--print` the README's next steps rely on).
#[test]
fn the_quick_start_configs_commands_are_the_readmes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let config = std::fs::read_to_string(root.join("config/hookgate.yaml")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let words = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    // The README's command lines, without their trailing comments.
    let readme_commands: Vec<String> = readme
        .lines()
        .map(|l| words(l.split("  #").next().unwrap()))
        .collect();
    let commands: Vec<String> = config
        .lines()
        .filter_map(|l| l.strip_prefix("#   cargo run"))
        .map(|rest| words(&format!("cargo run{rest}")))
        .collect();
    assert_eq!(commands.len(), 2, "{config}");
    for command in commands {
        assert!(
            readme_commands.contains(&command),
            "`{command}` is not how the README runs it"
        );
    }
}

/// Every `curl` of the docs that posts a JSON event says it is JSON: without
/// `content-type: application/json` the gateway takes the body for a raw one and asks for an
/// `Event-Type` header (the README's tenant example did that).
#[test]
fn every_documented_curl_posting_json_says_so() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    let mut checked = 0;
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        // A command with its continuation lines.
        let mut command = String::new();
        for line in text.lines() {
            command.push_str(line.trim_end_matches('\\'));
            command.push(' ');
            if line.ends_with('\\') {
                continue;
            }
            if command.contains("curl ") && command.contains("-d '{") {
                checked += 1;
                assert!(
                    command.contains("content-type: application/json"),
                    "{}: {command}",
                    doc.display()
                );
            }
            command.clear();
        }
    }
    assert!(checked >= 4, "only {checked} commands found");
}

/// A reader that goes away (`hookgate config schema | head`) ends the command quietly; it
/// panicked with "failed printing to stdout: Broken pipe" and a backtrace.
#[test]
fn output_into_a_closed_pipe_ends_the_command_quietly() {
    for args in [
        &["config", "schema"][..],
        &["policy", "preview", "standard"],
        &["keygen", "ed25519"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader leaves before the command has written a line.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn config_check_accepts_an_sns_policy_in_yaml_and_pasted_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "ok.yaml", SEED_POLICIES);
    let out = hookgate(&["config", "check", &file.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The two policies of the file, the four presets counted apart.
    assert!(
        text(&out.stdout).contains("; 2 policies and the 4 presets)"),
        "{}",
        text(&out.stdout)
    );
}

/// The rows of a preview table: (attempt, wait, since event, phase).
fn table_rows(stdout: &str) -> Vec<(u32, String, String, String)> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut cells = line.split("  ").map(str::trim).filter(|c| !c.is_empty());
            let n = cells.next()?.parse().ok()?;
            let wait = cells.next()?.to_owned();
            let at = cells.next()?.to_owned();
            let phase = cells.next()?.to_owned();
            Some((n, wait, at, phase))
        })
        .collect()
}

#[test]
fn policy_preview_shows_the_seed_policys_51_attempts_and_draws_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "seed.yaml", SEED_POLICIES);
    let config = config.display().to_string();
    let svg = dir.path().join("seed.svg");
    let out = hookgate(&[
        "policy",
        "preview",
        "seed",
        "--config",
        &config,
        "--svg",
        &svg.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("seed: SNS delivery policy, 50 retries (3 no-delay, 2 pre-backoff at 1 s, 10 exponential backoff 1 → 60 s, 35 post-backoff at 60 s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("51 attempts, the last 36m 45s after the event (without jitter)"),
        "{stdout}"
    );
    let rows = table_rows(&stdout);
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=51).collect::<Vec<_>>()
    );
    let phases: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
    let expected_phases: Vec<&str> = std::iter::once("initial")
        .chain(std::iter::repeat_n("no-delay", 3))
        .chain(std::iter::repeat_n("pre-backoff", 2))
        .chain(std::iter::repeat_n("backoff", 10))
        .chain(std::iter::repeat_n("post-backoff", 35))
        .collect();
    assert_eq!(phases, expected_phases);
    assert_eq!((rows[4].1.as_str(), rows[4].2.as_str()), ("1s", "1s"));
    assert_eq!((rows[15].1.as_str(), rows[15].2.as_str()), ("1m", "1m 45s"));
    assert_eq!((rows[50].1.as_str(), rows[50].2.as_str()), ("1m", "36m 45s"));
    assert!(stdout.contains(&format!("chart written to {}", svg.display())));

    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{chart}"
    );
    assert!(chart.trim_end().ends_with("</svg>"));
    assert!(chart.contains("<title>Policy seed"));
    assert!(chart.contains("attempt (all 51)"));
    for phase in ["no-delay", "pre-backoff", "backoff", "post-backoff"] {
        assert!(
            chart.contains(&format!(">{phase}</text>")),
            "legend lacks {phase}"
        );
    }

    // The pasted JSON previews the same attempts.
    let out = hookgate(&["policy", "preview", "seed-json", "--config", &config]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(table_rows(&text(&out.stdout)), rows);
}

#[test]
fn policy_preview_of_standard_needs_no_config_and_ends_at_the_deadline() {
    let out = hookgate(&["policy", "preview", "standard"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let rows = table_rows(&stdout);
    let waits: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        waits,
        ["0s", "30s", "2m", "10m", "1h", "4h", "12h", "1d", "1d 6h 47m 30s"]
    );
    assert_eq!(rows[8].2, "3d");
    assert!(rows[8].3.contains("brought forward to the deadline"), "{stdout}");
}

#[test]
fn policy_preview_of_an_unknown_policy_names_the_known_ones() {
    let out = hookgate(&["policy", "preview", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no policy `nope`"), "{stderr}");
    for preset in [
        "standard",
        "sns-http-default",
        "sns-aws-managed",
        "sns-customer-managed",
    ] {
        assert!(stderr.contains(preset), "{stderr}");
    }
}

#[test]
fn policy_preview_refuses_an_invalid_config_with_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "bad.yaml",
        "policies:\n  fast:\n    sns: {healthyRetryPolicy: {numRetries: 101}}\n",
    );
    let label = file.display().to_string();
    let out = hookgate(&["policy", "preview", "fast", "--config", &label]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!("{label}:3: policies.fast.sns.healthyRetryPolicy.numRetries: 101 is above the maximum 100")
    );
}

#[test]
fn the_presets_preview_with_the_totals_docs_policies_md_gives() {
    let totals = [
        ("standard", "9 attempts, the last 3d after the event"),
        ("sns-http-default", "4 attempts, the last 1m after the event"),
        (
            "sns-customer-managed",
            "51 attempts, the last 6h 37m 33s after the event",
        ),
        (
            "sns-aws-managed",
            "100016 attempts, the last 23d 3h 34m 2s after the event",
        ),
    ];
    for (name, total) in totals {
        let out = hookgate(&["policy", "preview", name]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(
            stdout.lines().nth(1),
            Some(format!("{total} (without jitter)").as_str())
        );
        // Long runs of equal waits fold, so even 100 016 attempts make a short table.
        assert!(
            stdout.lines().count() < 100,
            "{name}: {} lines",
            stdout.lines().count()
        );
    }
}

#[test]
fn the_chart_in_the_docs_is_what_policy_preview_draws() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("standard.svg");
    let out = hookgate(&[
        "policy",
        "preview",
        "standard",
        "--svg",
        &svg.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/standard-schedule.svg"
    ))
    .unwrap();
    assert!(
        drawn == committed,
        "docs/standard-schedule.svg is stale: run `hookgate policy preview standard --svg docs/standard-schedule.svg`"
    );
}

/// The ```yaml blocks of a Markdown file, without the indentation of a list item.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match &mut current {
            None if trimmed == "```yaml" => current = Some((line.len() - trimmed.len(), String::new())),
            None => {}
            Some(_) if trimmed == "```" => blocks.push(current.take().expect("in a block").1),
            Some((indent, text)) => {
                text.push_str(line.get(*indent..).unwrap_or(""));
                text.push('\n');
            }
        }
    }
    blocks
}

#[test]
fn every_config_in_the_plugin_guide_passes_config_check_as_it_is() {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/writing-a-plugin.md");
    let blocks = yaml_blocks(&std::fs::read_to_string(guide).unwrap());
    // The Rust walkthrough's, the Python walkthrough's and the JavaScript transformation's,
    // each binding its plugin.
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    assert!(blocks[0].contains("plugin: team-header, config: { team: payments }"));
    assert!(blocks[1].contains("plugin: team-label, config: { team: payments }"));
    assert!(blocks[2].contains("plugin: js\n      config:\n        code: |"));
    let dir = tempfile::tempdir().unwrap();
    for (i, block) in blocks.iter().enumerate() {
        let file = write(dir.path(), &format!("guide-{i}.yaml"), block);
        let out = hookgate(&["config", "check", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{block}\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("ok (1 topic and the built-in `svix`; 1 endpoint;"),
            "{}",
            text(&out.stdout)
        );
    }
    // A loopback receiver is reached only through `delivery.allow_networks` (the check cannot
    // tell: attempts would fail with `blocked_address`), so each config lists it.
    for block in &blocks {
        assert!(block.contains("url: http://127.0.0.1:9000/hooks"), "{block}");
        assert!(block.contains("allow_networks: [127.0.0.0/8]"), "{block}");
    }
}

#[test]
fn yaml_blocks_are_found_in_list_items_and_at_the_margin() {
    let markdown =
        "text\n\n1. Step:\n\n   ```yaml\n   a:\n     b: 1\n   ```\n\n```yaml\nc: 2\n```\n\n```sh\nd\n```\n";
    assert_eq!(yaml_blocks(markdown), ["a:\n  b: 1\n", "c: 2\n"]);
}

/// `hookgate keygen ed25519` prints a `whsk_` seed and the `whpk_` key that another Ed25519
/// implementation (ed25519-dalek) derives from it; two runs never print the same key.
#[test]
fn keygen_prints_an_ed25519_pair_that_belongs_together() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    let pair = || {
        let out = hookgate(&["keygen", "ed25519"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let field = |name: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| panic!("no `{name}` in {stdout}"))
        };
        (field("secret:"), field("public_key:"))
    };
    let (secret, public) = pair();
    let seed: [u8; 32] = STANDARD
        .decode(secret.strip_prefix("whsk_").unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let derived = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    assert_eq!(public, format!("whpk_{}", STANDARD.encode(derived.as_bytes())));
    assert_ne!(pair().0, secret);
}

/// A PostgreSQL store is not copied by `hookgate backup`: it says how (pg_dump, and the key the
/// dump needs), exits 1, and never prints the URL (it may hold a password).
#[test]
fn backup_of_a_postgresql_store_explains_pg_dump() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "hookgate.yaml",
        "storage:\n  url: postgres://hookgate:s3cret@db.internal/hookgate\n  \
         encryption_key: dGVzdCBrZXkgdGVzdCBrZXkgdGVzdCBrZXkgdGVzdCA=\ntopics:\n  t: {}\n",
    );
    let to = dir.path().join("copy.db");
    let out = hookgate(&[
        "backup",
        "--config",
        config.to_str().unwrap(),
        "--to",
        to.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("pg_dump") && stderr.contains("storage.encryption_key"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret") && !text(&out.stdout).contains("s3cret"));
    assert!(!to.exists());
}

/// `--version` names the version and the commit the binary was built from (README "Install").
#[test]
fn version_names_the_version_and_the_commit() {
    let out = hookgate(&["--version"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        stdout.starts_with(&format!("hookgate {version} (commit ")),
        "{stdout}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(head) = head {
        // Built in this checkout: the commit is HEAD's, unless the build was told another.
        let commit = std::env::var("HOOKGATE_COMMIT").unwrap_or_else(|_| text(&head.stdout));
        assert!(stdout.contains(commit.trim()), "{stdout} does not name {commit}");
    }
}

/// Completions and the manual page come from the same definition as `--help`, so every
/// command the binary has is in them.
#[test]
fn completions_and_the_man_page_name_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = hookgate(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for command in ["serve", "config", "policy", "migrate", "completions"] {
            assert!(script.contains(command), "{shell} completions lack `{command}`");
        }
    }
    let out = hookgate(&["man"]);
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH hookgate"),
        "{}",
        &page[..200]
    );
    assert!(page.contains("serve") && page.contains("A webhook delivery gateway"));

    let dir = tempfile::tempdir().unwrap();
    let out = hookgate(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in ["hookgate.1", "hookgate-serve.1", "hookgate-config-check.1"] {
        assert!(dir.path().join(page).is_file(), "{page} was not written");
    }
}
