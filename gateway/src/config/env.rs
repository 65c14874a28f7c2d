//! `${ENV}` interpolation, done on the text before YAML parsing so that secrets never have to
//! be written into the file. `${NAME:-fallback}` gives a fallback; `$${` writes a literal `${`.
//! Comments — whole lines and the end of a line after ` #` — are left alone: a comment that
//! mentions `${SECRET}` as an example must not make the file depend on that variable.

/// A variable that is not set and has no fallback, or a value that would break the file.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EnvProblem {
    pub(super) line: usize,
    pub(super) reason: String,
}

pub(super) fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<EnvProblem>> {
    let mut out = String::with_capacity(text.len());
    let mut problems = Vec::new();
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let (line, comment) = line.split_at(comment_start(line).unwrap_or(line.len()));
        let mut rest = line;
        while let Some(at) = rest.find("${") {
            if rest[..at].ends_with('$') {
                out.push_str(&rest[..at - 1]);
                out.push_str("${");
                rest = &rest[at + 2..];
                continue;
            }
            out.push_str(&rest[..at]);
            let Some(len) = rest[at + 2..].find('}') else {
                problems.push(EnvProblem {
                    line: index + 1,
                    reason: "`${` without a closing `}`".into(),
                });
                out.push_str(&rest[at..]);
                rest = "";
                break;
            };
            let inner = &rest[at + 2..at + 2 + len];
            let (name, fallback) = match inner.split_once(":-") {
                Some((name, fallback)) => (name, Some(fallback)),
                None => (inner, None),
            };
            let valid_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid_name {
                problems.push(EnvProblem {
                    line: index + 1,
                    reason: format!("`${{{inner}}}` is not a valid variable reference"),
                });
            } else {
                match lookup(name).or_else(|| fallback.map(str::to_owned)) {
                    Some(value) if value.contains(['\n', '\r']) => problems.push(EnvProblem {
                        line: index + 1,
                        reason: format!("environment variable {name} contains a line break"),
                    }),
                    Some(value) => out.push_str(&value),
                    None => problems.push(EnvProblem {
                        line: index + 1,
                        reason: format!("environment variable {name} is not set (write ${{{name}:-fallback}} for a default)"),
                    }),
                }
            }
            rest = &rest[at + 2 + len + 1..];
        }
        out.push_str(rest);
        out.push_str(comment);
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Where a YAML comment starts in `line`: a `#` at the start or after whitespace, outside a
/// quoted scalar. A quote opens a scalar only where a scalar can begin (after indentation, `:`,
/// `-`, `[`, `{` or `,`), so the apostrophe in `description: don't` opens nothing.
fn comment_start(line: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut previous: Option<char> = None;
    let mut last_significant: Option<char> = None;
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match quote {
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some('\'') if c == '\'' && chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '#' && previous.is_none_or(char::is_whitespace) => return Some(at),
            None if matches!(c, '"' | '\'')
                && last_significant.is_none_or(|s| matches!(s, ':' | '-' | '[' | '{' | ',')) =>
            {
                quote = Some(c);
            }
            None => {}
        }
        previous = Some(c);
        if !c.is_whitespace() {
            last_significant = Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SECRET" => Some("whsec_abc".into()),
            "EMPTY" => Some(String::new()),
            "MULTI" => Some("a\nb".into()),
            _ => None,
        }
    }

    #[test]
    fn replaces_set_variables_and_uses_fallbacks() {
        let out = interpolate("secret: ${SECRET}\nport: ${PORT:-8080}\nempty: '${EMPTY}'\n", env).unwrap();
        assert_eq!(out, "secret: whsec_abc\nport: 8080\nempty: ''\n");
    }

    #[test]
    fn a_missing_variable_names_its_line() {
        let problems = interpolate("a: 1\nb: ${NOPE}\n", env).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].line, 2);
        assert!(problems[0].reason.contains("NOPE is not set"), "{problems:?}");
    }

    #[test]
    fn escapes_comments_and_bad_references() {
        assert_eq!(interpolate("a: $${LITERAL}\n", env).unwrap(), "a: ${LITERAL}\n");
        assert_eq!(
            interpolate("# uses ${NOPE}\na: 1\n", env).unwrap(),
            "# uses ${NOPE}\na: 1\n"
        );
        assert_eq!(
            interpolate("a: ${SECRET}   # or ${NOPE}\n", env).unwrap(),
            "a: whsec_abc   # or ${NOPE}\n"
        );
        assert_eq!(interpolate("a: ${1BAD}\n", env).unwrap_err()[0].line, 1);
        assert!(
            interpolate("a: ${MULTI}\n", env).unwrap_err()[0]
                .reason
                .contains("line break")
        );
        assert!(
            interpolate("a: ${OPEN\n", env).unwrap_err()[0]
                .reason
                .contains("closing")
        );
    }

    #[test]
    fn a_hash_inside_quotes_or_a_word_is_not_a_comment() {
        assert_eq!(comment_start("a: 1 # note"), Some(5));
        assert_eq!(comment_start("  # whole line"), Some(2));
        assert_eq!(comment_start("a: \"x # y\" # z"), Some(11));
        assert_eq!(comment_start("a: [\"#\", '#'] # z"), Some(14));
        assert_eq!(comment_start("a: 'it''s # y' # z"), Some(15));
        assert_eq!(comment_start("a: x#y"), None);
        assert_eq!(comment_start("a: don't # z"), Some(9));
        assert_eq!(comment_start("- \"a\\\" # b\""), None);
        assert_eq!(
            interpolate("k: \"${SECRET} # kept\"\n", env).unwrap(),
            "k: \"whsec_abc # kept\"\n"
        );
    }
}
