//! Field-level validation shared by every input.
//!
//! Inputs are checked in full and every problem is reported at once, each naming the field it is
//! about (a JSON-pointer-like dotted path such as `metadata.zone`), so a client fixes a request in
//! one round trip. The HTTP layer turns [`Invalid`] into a 422 problem with an `errors` list.

use serde::Serialize;
use utoipa::ToSchema;

/// One thing wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// Dotted path of the offending field, e.g. `cpu_usage` or `metadata.zone`.
    #[schema(example = "cpu_usage")]
    pub field: String,
    /// What is wrong and what is accepted.
    #[schema(example = "must be a number from 0 to 100")]
    pub message: String,
}

/// Every problem found in one input; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input: {}", .0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; "))]
pub struct Invalid(pub Vec<FieldError>);

impl Invalid {
    pub fn one(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self(vec![FieldError {
            field: field.into(),
            message: message.into(),
        }])
    }
}

/// Collects field errors while an input is checked.
#[derive(Debug, Default)]
pub struct Violations(Vec<FieldError>);

impl Violations {
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Records the error of a field check, keeping its value when it passed.
    pub fn check<T>(&mut self, result: Result<T, Invalid>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(Invalid(errors)) => {
                self.0.extend(errors);
                None
            }
        }
    }

    /// `Ok(value)` when nothing was recorded, otherwise every recorded error.
    pub fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, Invalid> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(Invalid(self.0))
        }
    }
}

/// A range a number someone sends must fall in — a value, or how many items a list or a map
/// holds — declared once, beside the type it constrains: the published schema states it
/// (`http::contract` reads the same constant) and the server checks it ([`Bound::check`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub min: f64,
    pub max: f64,
    /// The minimum itself is out (Orleans' half-open ranges, such as `(0, 0.1]`).
    pub min_exclusive: bool,
}

impl Bound {
    /// From `min` to `max`, both in.
    pub const fn new(min: f64, max: f64) -> Self {
        Self {
            min,
            max,
            min_exclusive: false,
        }
    }

    /// More than 0, at most `max`.
    pub const fn above_zero(max: f64) -> Self {
        Self {
            min: 0.0,
            max,
            min_exclusive: true,
        }
    }

    pub fn allows(&self, value: f64) -> bool {
        let above = if self.min_exclusive {
            value > self.min
        } else {
            value >= self.min
        };
        above && value <= self.max
    }

    /// The range in words: `from 1 to 1000`, `more than 0 and at most 0.1`.
    pub fn describe(&self) -> String {
        if self.min_exclusive {
            format!(
                "more than {} and at most {}",
                number(self.min),
                number(self.max)
            )
        } else {
            format!("from {} to {}", number(self.min), number(self.max))
        }
    }

    /// Records that `field` is out of range unless `value` is in it.
    pub fn check(&self, v: &mut Violations, field: impl Into<String>, value: f64) {
        if !self.allows(value) {
            v.add(
                field,
                format!("must be {}, got {}", self.describe(), number(value)),
            );
        }
    }

    /// [`Self::check`] of how many items a list or a map holds.
    pub fn check_count(&self, v: &mut Violations, field: impl Into<String>, count: usize) {
        if !self.allows(count as f64) {
            v.add(
                field,
                format!("must hold {} items, got {count}", self.describe()),
            );
        }
    }
}

/// A number as people write it: whole numbers without a fraction.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Largest page a list answers (`limit`), and the page it answers without one.
pub const MAX_PAGE: u32 = 1_000;
pub const DEFAULT_PAGE: u32 = 100;

/// A list's page size: `limit` if given and from 1 to [`MAX_PAGE`], else [`DEFAULT_PAGE`].
pub fn page_limit(limit: Option<u32>) -> Result<u32, Invalid> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    let mut v = Violations::default();
    PAGE_LIMIT.check(&mut v, "limit", f64::from(limit));
    v.finish(|| limit)
}

/// A page size's bound (`limit`), as the published parameters state it.
pub const PAGE_LIMIT: Bound = Bound::new(1.0, MAX_PAGE as f64);

/// The largest integer a JSON number carries exactly in every client language (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Characters no label may hold, as a regular-expression class body: control characters (Unicode
/// `Cc`, what `char::is_control` tests). Lone UTF-16 surrogates never get this far: they are not
/// valid JSON text, refused with 400 before any field is looked at.
const CONTROL_CLASS: &str = r"\u0000-\u001F\u007F-\u009F";
/// White space that is not a control character (the rest of what `char::is_whitespace` tests).
const SPACE_CLASS: &str = r" \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";

/// The pattern [`label`] enforces, for the published contract (ECMA-262 syntax, which Python's and
/// Rust's regular expressions also read).
pub fn label_pattern() -> String {
    format!("^[^{CONTROL_CLASS}]+$")
}

/// The pattern of a label that may also be empty.
pub fn optional_label_pattern() -> String {
    format!("^[^{CONTROL_CLASS}]*$")
}

/// The pattern [`token`] enforces; `extra` lists further characters to refuse, e.g. "/".
pub fn token_pattern(extra: &str) -> String {
    format!("^{}$", token_class(extra, "+"))
}

/// One or more (`repeat`) token characters, also refusing `extra`.
pub fn token_class(extra: &str, repeat: &str) -> String {
    format!("[^{CONTROL_CLASS}{SPACE_CLASS}{extra}]{repeat}")
}

/// Checks a free-form label: length in characters (Unicode scalar values, what JSON Schema's
/// `maxLength` counts), and no control characters (NUL included) anywhere.
pub fn label(field: &str, value: &str, max_chars: usize) -> Result<(), Invalid> {
    if value.is_empty() {
        return Err(Invalid::one(field, "must not be empty"));
    }
    let chars = value.chars().count();
    if chars > max_chars {
        return Err(Invalid::one(
            field,
            format!("must be at most {max_chars} characters, got {chars}"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Invalid::one(
            field,
            "must not contain control characters (NUL, newline, tab, …)",
        ));
    }
    Ok(())
}

/// Like [`label`], and also without white space: for identifiers that travel in URLs and logs.
pub fn token(field: &str, value: &str, max_chars: usize) -> Result<(), Invalid> {
    label(field, value, max_chars)?;
    if value.chars().any(char::is_whitespace) {
        return Err(Invalid::one(field, "must not contain white space"));
    }
    Ok(())
}

/// Most unknown fields [`from_stored_json`] drops from one document.
const MAX_UNKNOWN_STORED_FIELDS: usize = 256;

/// Decodes a document this service stored, perhaps written by a newer version with fields this
/// one does not know. Those are ignored (and stay in the database untouched); a request with an
/// unknown field is still refused by the HTTP layer. The types refuse unknown fields, so each one
/// is found by its error's path, dropped from this copy, and decoding goes on.
pub fn from_stored_json<T: serde::de::DeserializeOwned>(
    mut value: serde_json::Value,
) -> Result<T, String> {
    for _ in 0..=MAX_UNKNOWN_STORED_FIELDS {
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(decoded) => return Ok(decoded),
            Err(error) => {
                let message = error.inner().to_string();
                let removed = unknown_field_name(&message)
                    .is_some_and(|name| remove_unknown(&mut value, error.path(), name));
                if !removed {
                    return Err(error.to_string());
                }
            }
        }
    }
    Err(format!(
        "more than {MAX_UNKNOWN_STORED_FIELDS} unknown fields"
    ))
}

/// The name in serde's "unknown field `name`, expected …".
fn unknown_field_name(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")?
        .split_once('`')
        .map(|(name, _)| name)
}

/// Removes the unknown member `name`. serde_path_to_error's path usually ends with the name
/// itself; inside an internally tagged enum (a filter) it ends at the object holding it.
fn remove_unknown(
    value: &mut serde_json::Value,
    path: &serde_path_to_error::Path,
    name: &str,
) -> bool {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let holder = match segments.split_last() {
        Some((Segment::Map { key }, parents)) if key == name => parents,
        _ => &segments[..],
    };
    let mut at = value;
    for segment in holder {
        at = match (segment, at) {
            (Segment::Map { key }, serde_json::Value::Object(map)) => match map.get_mut(key) {
                Some(next) => next,
                None => return false,
            },
            (Segment::Seq { index }, serde_json::Value::Array(items)) => {
                match items.get_mut(*index) {
                    Some(next) => next,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    match at {
        serde_json::Value::Object(map) => map.remove(name).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_reject_nul_and_overlong_values_naming_the_field() {
        assert_eq!(label("role", "a\0b", 10).unwrap_err().0[0].field, "role");
        assert!(label("role", &"x".repeat(11), 10).is_err());
        assert!(label("role", "", 10).is_err());
        assert!(label("role", "front end", 10).is_ok());
        assert!(token("silo", "front end", 10).is_err());
    }

    #[test]
    fn violations_report_every_error_at_once() {
        let mut v = Violations::default();
        v.check(label("a", "", 1));
        v.check(label("b", "\n", 1));
        let errors = v.finish(|| ()).unwrap_err().0;
        assert_eq!(
            errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
