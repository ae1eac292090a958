//! Extended JSON in and out: arguments and JSON Lines records parse as relaxed or canonical
//! Extended JSON; documents print as relaxed Extended JSON (what mongoexport writes).
//!
//! Records may nest as deep as stored BSON may ([`MAX_NESTING`] levels) and arguments as deep
//! as requests ([`MAX_REQUEST_NESTING`]), not as deep as serde_json's own limit of 128. Its
//! limit is off, so the depth is bounded here instead: a scan of the text, which recurses into
//! nothing, refuses what could not fit before anything recursive (parsing, converting,
//! dropping) runs on it, and the converted document is then held to the exact limit.

use crate::CliResult;
use serde_json::Value;
use tsbucket::bson::{Bson, Document};
use tsbucket::depth::{within, MAX_NESTING, MAX_REQUEST_NESTING};

/// Parses one JSON object in relaxed or canonical Extended JSON: a record to store, which may
/// nest [`MAX_NESTING`] levels deep.
pub fn parse_doc(text: &str) -> Result<Document, String> {
    parse_within(text, MAX_NESTING)
}

/// Parses an argument that must hold a JSON object, naming the argument in the error.
pub fn doc_arg(what: &str, text: &str) -> CliResult<Document> {
    parse_within(text, MAX_REQUEST_NESTING).map_err(|e| format!("{what}: {e}").into())
}

/// Parses a pipeline argument: a JSON array of stage objects, or a single stage object.
pub fn pipeline_arg(text: &str) -> CliResult<Vec<Document>> {
    // The array adds one level to the stages' own.
    let v = parse_value(text, MAX_REQUEST_NESTING + 1).map_err(|e| format!("pipeline: {e}"))?;
    let stages = match v {
        Value::Array(stages) => stages,
        v @ Value::Object(_) => vec![v],
        _ => return Err("pipeline: expected an array of stage documents".into()),
    };
    stages
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            value_to_doc(s)
                .and_then(|d| held_to(d, MAX_REQUEST_NESTING))
                .map_err(|e| format!("pipeline stage {i}: {e}").into())
        })
        .collect()
}

/// Parses one object whose elements may sit at most `limit` levels deep (its own fields being
/// at level 1, as for BSON).
fn parse_within(text: &str, limit: usize) -> Result<Document, String> {
    let doc = value_to_doc(parse_value(text, limit)?)?;
    held_to(doc, limit)
}

/// `doc`, unless an element of it sits deeper than `limit` levels.
fn held_to(doc: Document, limit: usize) -> Result<Document, String> {
    match within(&doc, limit) {
        true => Ok(doc),
        false => Err(too_deep(limit)),
    }
}

fn too_deep(limit: usize) -> String {
    format!("the document is nested more than {limit} levels deep (the limit is {limit})")
}

/// Parses JSON text holding a document that may nest `limit` levels deep.
fn parse_value(text: &str, limit: usize) -> Result<Value, String> {
    // Extended JSON spells some values as objects: `{"$date": {"$numberLong": "1"}}` is two
    // levels of JSON for a leaf, a `$dbPointer` three, and each level of a code's `$scope`
    // two. Text nested deeper than that allows cannot hold a document within the limit.
    if json_depth_over(text.as_bytes(), 2 * limit + 3) {
        return Err(too_deep(limit));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let mut values = de.into_iter::<Value>();
    let v = match values.next() {
        Some(v) => v.map_err(|e| format!("invalid JSON: {e}"))?,
        None => return Err("invalid JSON: no value".into()),
    };
    let rest = text.get(values.byte_offset()..).unwrap_or_default();
    if !rest.trim().is_empty() {
        return Err("invalid JSON: trailing characters after the value".into());
    }
    Ok(v)
}

/// True when objects and arrays in `text` nest more than `max` deep. Brackets inside strings
/// do not count; malformed text is left for the parser to describe.
fn json_depth_over(text: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

fn value_to_doc(v: Value) -> Result<Document, String> {
    match v {
        Value::Object(map) => {
            Document::try_from(map).map_err(|e| format!("invalid Extended JSON: {e}"))
        }
        other => Err(format!("expected a JSON object, found {}", kind_of(&other))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A document as relaxed Extended JSON.
pub fn to_relaxed(doc: Document) -> Value {
    Bson::Document(doc).into_relaxed_extjson()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket::bson::{doc, DateTime};

    #[test]
    fn relaxed_and_canonical_dates_parse_alike() {
        let a = parse_doc(r#"{"t": {"$date": "2016-01-01T00:00:00Z"}, "n": 1}"#).unwrap();
        let b = parse_doc(
            r#"{"t": {"$date": {"$numberLong": "1451606400000"}}, "n": {"$numberInt": "1"}}"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a,
            doc! {"t": DateTime::from_millis(1_451_606_400_000), "n": 1}
        );
    }

    #[test]
    fn field_order_is_kept_both_ways() {
        let d = parse_doc(r#"{"z": 1, "a": -1, "m": 1}"#).unwrap();
        assert_eq!(d.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
        assert_eq!(to_relaxed(d).to_string(), r#"{"z":1,"a":-1,"m":1}"#);
    }

    /// A JSON object whose innermost element, `leaf`, sits `levels` levels deep.
    fn nested(levels: usize, leaf: &str) -> String {
        "{\"a\": ".repeat(levels) + leaf + &"}".repeat(levels)
    }

    #[test]
    fn records_nest_as_deep_as_bson_allows_and_no_deeper() {
        assert!(parse_doc(&nested(MAX_NESTING, "1")).is_ok());
        // Extended JSON's wrappers are values, not levels.
        let date = r#"{"$date": {"$numberLong": "1"}}"#;
        let pointer =
            r#"{"$dbPointer": {"$ref": "c", "$id": {"$oid": "57e193d7a9cc81b4027498b5"}}}"#;
        for leaf in [date, pointer, "[]", "{}"] {
            assert!(parse_doc(&nested(MAX_NESTING, leaf)).is_ok(), "{leaf}");
        }
        for text in [
            nested(MAX_NESTING + 1, "1"),
            nested(MAX_NESTING, "[1]"),
            nested(MAX_NESTING, r#"{"b": {"$numberLong": "1"}}"#),
            // The most the scan lets through to the parser.
            nested(2 * MAX_NESTING + 3, "1"),
            nested(2 * MAX_NESTING + 4, "1"),
        ] {
            let e = parse_doc(&text).unwrap_err();
            assert!(e.contains("nested more than 180 levels deep"), "{e}");
        }
        // Arguments may nest as deep as requests.
        assert!(doc_arg("filter", &nested(MAX_REQUEST_NESTING, "1")).is_ok());
        let e = doc_arg("filter", &nested(MAX_REQUEST_NESTING + 1, "1")).unwrap_err();
        assert!(e.to_string().contains("more than 200 levels"), "{e}");
        let stages = format!("[{}]", nested(MAX_REQUEST_NESTING, "1"));
        assert!(pipeline_arg(&stages).is_ok());
        let stages = format!("[{}]", nested(MAX_REQUEST_NESTING + 1, "1"));
        assert!(pipeline_arg(&stages).is_err());
    }

    #[test]
    fn nesting_a_code_scope_counts_as_bson_counts_it() {
        for scopes in [MAX_NESTING / 2, MAX_NESTING / 2 + 1, MAX_NESTING] {
            let (mut text, mut bson) = ("1".to_string(), Bson::Int32(1));
            for _ in 0..scopes {
                text = format!(r#"{{"$code": "f()", "$scope": {{"a": {text}}}}}"#);
                bson = Bson::JavaScriptCodeWithScope(tsbucket::bson::JavaScriptCodeWithScope {
                    code: "f()".into(),
                    scope: doc! {"a": bson},
                });
            }
            let text = format!(r#"{{"a": {text}}}"#);
            let fits = within(&doc! {"a": bson}, MAX_NESTING);
            assert_eq!(parse_doc(&text).is_ok(), fits, "{scopes} scopes");
        }
    }

    #[test]
    fn hostile_nesting_is_refused_without_recursing() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let e = parse_doc(&format!(r#"{{"a": {deep}}}"#)).unwrap_err();
        assert!(e.contains("nested more than 180 levels deep"), "{e}");
        let e = parse_doc(&nested(100_000, "1")).unwrap_err();
        assert!(e.contains("nested more than 180 levels deep"), "{e}");
        // Unclosed, too.
        assert!(parse_doc(&"{\"a\": ".repeat(100_000)).is_err());
        // Brackets within strings are text.
        let text = format!(r#"{{"a": "{}", "b\"{{": 1}}"#, "{[".repeat(1000));
        assert_eq!(parse_doc(&text).unwrap().len(), 2);
    }

    #[test]
    fn non_objects_are_refused() {
        assert!(parse_doc("[1]").unwrap_err().contains("an array"));
        assert!(parse_doc("{").unwrap_err().contains("invalid JSON"));
        assert_eq!(pipeline_arg(r#"{"$count": "n"}"#).unwrap().len(), 1);
        assert!(pipeline_arg("3").is_err());
        assert!(parse_doc(r#"{"a": 1} {"b": 2}"#).is_err());
        assert!(parse_doc("  ").is_err());
    }
}
