//! Extended JSON in and out: arguments and JSON Lines records parse as relaxed or canonical
//! Extended JSON; documents print as relaxed Extended JSON (what mongoexport writes).
//!
//! Records may nest as deep as stored BSON may ([`MAX_NESTING`] levels) and arguments as deep
//! as requests ([`MAX_REQUEST_NESTING`]), not as deep as serde_json's own limit of 128. Its
//! limit is off, so the depth is bounded here instead: a scan of the text, which recurses into
//! nothing, refuses what could not fit before anything recursive (parsing, converting,
//! dropping) runs on it, and the converted document is then held to the exact limit.

use crate::common::CliResult;
use serde_json::Value;
use tsbucket::bson::{Bson, Document};
use tsbucket::depth::{within, MAX_NESTING, MAX_REQUEST_NESTING};

/// Parses one JSON object in relaxed or canonical Extended JSON: a record to store, which may
/// nest [`MAX_NESTING`] levels deep.
pub fn parse_doc(text: &str) -> Result<Document, String> {
    parse_within(text, MAX_NESTING)
}

/// The text of an argument: `@FILE` reads the file, `-` stdin, anything else is the text.
fn arg_text(what: &str, text: &str) -> CliResult<String> {
    let read = |r: std::io::Result<String>, from: &str| {
        r.map_err(|e| -> Box<dyn std::error::Error> { format!("{what}: {from}: {e}").into() })
    };
    match text {
        "-" => read(std::io::read_to_string(std::io::stdin()), "stdin"),
        _ => match text.strip_prefix('@') {
            Some(path) => read(std::fs::read_to_string(path), path),
            None => Ok(text.to_string()),
        },
    }
}

/// Reads an argument with `parse`: as strict JSON, else as mongosh syntax (see
/// [`crate::shell`]); when neither reads, the strict error with a hint.
fn lenient<T>(what: &str, text: &str, parse: impl Fn(&str) -> Result<T, String>) -> CliResult<T> {
    let text = arg_text(what, text)?;
    let strict = match parse(&text) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if let Ok(v) = crate::shell::to_strict(&text).and_then(|t| parse(&t)) {
        return Ok(v);
    }
    Err(format!(
        "{what}: {strict} (arguments are JSON or mongosh syntax: {{\"t\": {{\"$gte\": \
         {{\"$date\": \"2021-05-18T00:00:00Z\"}}}}}} or {{t: {{$gte: ISODate('2021-05-18')}}}}; \
         @FILE reads a file, - stdin)"
    )
    .into())
}

/// Parses an argument that must hold a JSON object, naming the argument in the error.
pub fn doc_arg(what: &str, text: &str) -> CliResult<Document> {
    lenient(what, text, |t| parse_within(t, MAX_REQUEST_NESTING))
}

/// Parses a pipeline argument: a JSON array of stage objects, or a single stage object.
pub fn pipeline_arg(text: &str) -> CliResult<Vec<Document>> {
    // The array adds one level to the stages' own.
    let v = lenient("pipeline", text, |t| {
        parse_value(t, MAX_REQUEST_NESTING + 1)
    })?;
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
            Document::try_from(map).map_err(|e| extended_json_error(&e.to_string()))
        }
        other => Err(format!("expected a JSON object, found {}", kind_of(&other))),
    }
}

/// The bson crate's refusal of an Extended JSON value in the user's terms: its own words name
/// its error kinds ("BSON error. Kind: ..."), and a bad `$date` says nothing of the forms
/// that work.
fn extended_json_error(e: &str) -> String {
    let detail = e
        .split("Message: ")
        .nth(1)
        .unwrap_or(e)
        .trim_end_matches('.');
    let bad_date = detail
        .strip_prefix("invalid value: string ")
        .and_then(|r| r.strip_suffix(", expected rfc3339 formatted utc datetime"));
    match bad_date {
        Some(v) => format!(
            "invalid Extended JSON: the $date {v} is not an RFC 3339 date and time with a zone \
             (such as \"2021-05-19T00:00:00Z\"); a date may also be written \
             {{\"$date\": {{\"$numberLong\": \"<epoch milliseconds>\"}}}}"
        ),
        None => format!("invalid Extended JSON: {detail}"),
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

/// A document as relaxed Extended JSON (see [`crate::extjson`] for how dates are written).
pub fn to_relaxed(doc: Document) -> Value {
    crate::extjson::relaxed(Bson::Document(doc))
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

    fn relaxed_text(d: Document) -> String {
        to_relaxed(d).to_string()
    }

    /// The ISO-8601 form for the years 1970 through 9999 only, as the Extended JSON spec says;
    /// the `bson` crate printed every date from the year 10000 on as the last instant of 9999.
    #[test]
    fn dates_outside_1970_to_9999_print_as_milliseconds() {
        let cases = [
            (i64::MIN, r#"{"$numberLong":"-9223372036854775808"}"#),
            (-1, r#"{"$numberLong":"-1"}"#),
            (0, r#""1970-01-01T00:00:00Z""#),
            (1, r#""1970-01-01T00:00:00.001Z""#),
            (253_402_300_799_999, r#""9999-12-31T23:59:59.999Z""#),
            (253_402_300_800_000, r#"{"$numberLong":"253402300800000"}"#),
            (i64::MAX, r#"{"$numberLong":"9223372036854775807"}"#),
        ];
        for (ms, date) in cases {
            let d = doc! {"t": DateTime::from_millis(ms)};
            let text = relaxed_text(d.clone());
            assert_eq!(text, format!(r#"{{"t":{{"$date":{date}}}}}"#));
            assert_eq!(parse_doc(&text).unwrap(), d, "{text}");
        }
    }

    /// Dates inside documents, arrays and code scopes are written the same way.
    #[test]
    fn nested_dates_print_as_milliseconds_too() {
        let late = DateTime::from_millis(i64::MAX);
        let code = tsbucket::bson::JavaScriptCodeWithScope {
            code: "f".into(),
            scope: doc! {"at": late},
        };
        let d = doc! {"a": [late, {"b": late}], "c": {"d": [[late]]}, "e": code};
        let text = relaxed_text(d.clone());
        assert!(!text.contains("9999"), "{text}");
        assert_eq!(text.matches("9223372036854775807").count(), 4, "{text}");
        assert_eq!(parse_doc(&text).unwrap(), d);
    }

    #[test]
    fn late_and_early_dates_parse_in_either_form() {
        let ms = 253_402_300_800_000_i64;
        let long = parse_doc(&format!(
            r#"{{"t": {{"$date": {{"$numberLong": "{ms}"}}}}}}"#
        ));
        assert_eq!(long.unwrap(), doc! {"t": DateTime::from_millis(ms)});
        let iso = parse_doc(r#"{"t": {"$date": "1969-12-31T23:59:59.999Z"}}"#).unwrap();
        assert_eq!(iso, doc! {"t": DateTime::from_millis(-1)});
        let legacy = parse_doc(r#"{"t": {"$date": -5}}"#).unwrap();
        assert_eq!(legacy, doc! {"t": DateTime::from_millis(-5)});
    }

    mod round_trip {
        use super::super::*;
        use proptest::prelude::*;
        use tsbucket::bson::oid::ObjectId;
        use tsbucket::bson::{Binary, DateTime, Timestamp};

        /// Dates from the whole range, weighted to the ends, 1970, the year 10000, and
        /// the 32-bit second limits.
        fn date_ms() -> impl Strategy<Value = i64> {
            let edge = prop::sample::select(vec![
                i64::MIN,
                i64::MAX,
                0,
                crate::extjson::YEAR_10000_MS,
                (1 << 31) * 1000,
                -(1 << 31) * 1000,
                (1 << 32) * 1000,
            ]);
            prop_oneof![
                2 => (edge, -2i64..=2).prop_map(|(e, d)| e.saturating_add(d)),
                1 => any::<i64>(),
                1 => -100_000_000_000_000i64..300_000_000_000_000,
            ]
        }

        /// Values relaxed Extended JSON keeps apart: not an Int64 that fits an Int32 (it
        /// prints as a plain number, which reads back as an Int32), nor NaN (never equal).
        fn value() -> impl Strategy<Value = Bson> {
            let leaf = prop_oneof![
                4 => date_ms().prop_map(|ms| Bson::DateTime(DateTime::from_millis(ms))),
                1 => any::<i32>().prop_map(Bson::Int32),
                1 => any::<i64>()
                    .prop_filter("fits an Int32", |&i| i32::try_from(i).is_err())
                    .prop_map(Bson::Int64),
                1 => any::<f64>().prop_filter("NaN", |f| !f.is_nan()).prop_map(Bson::Double),
                1 => ".{0,8}".prop_map(Bson::String),
                1 => any::<bool>().prop_map(Bson::Boolean),
                1 => Just(Bson::Null),
                1 => any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
                1 => (any::<u32>(), any::<u32>())
                    .prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
                1 => prop::collection::vec(any::<u8>(), 0..6).prop_map(|bytes| {
                    Bson::Binary(Binary { subtype: tsbucket::bson::spec::BinarySubtype::Generic, bytes })
                }),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                    prop::collection::vec(("[a-z]{1,3}", inner), 0..4)
                        .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
                ]
            })
        }

        proptest! {
            /// A document printed as the CLI prints it reads back as the same document.
            #[test]
            fn printed_documents_parse_back_identical(
                fields in prop::collection::vec(("[a-z]{1,3}", value()), 0..6),
                t in date_ms(),
            ) {
                let mut d: Document = fields.into_iter().collect();
                d.insert("t", DateTime::from_millis(t));
                let text = to_relaxed(d.clone()).to_string();
                prop_assert_eq!(parse_doc(&text).unwrap(), d, "{}", text);
            }

            /// The writer of BSON bytes straight from JSON gives the bytes of the document
            /// `parse_doc` reads, or leaves the record to it; in canonical Extended JSON too.
            #[test]
            fn json_written_straight_to_bson_is_the_parsed_document(
                fields in prop::collection::vec(("[a-z$]{1,3}", value()), 0..6),
                t in date_ms(),
                canonical in any::<bool>(),
            ) {
                let mut d: Document = fields.into_iter().collect();
                d.insert("t", DateTime::from_millis(t));
                let text = match canonical {
                    true => Bson::Document(d.clone()).into_canonical_extjson().to_string(),
                    false => to_relaxed(d.clone()).to_string(),
                };
                let mut bytes = Vec::new();
                if crate::jsonbson::transcode(&text, &mut bytes).is_some() {
                    let want = tsbucket::bson::RawDocumentBuf::try_from(&parse_doc(&text).unwrap())
                        .unwrap();
                    prop_assert_eq!(bytes, want.into_bytes(), "{}", text);
                }
            }
        }

        proptest! {
            /// BSON bytes written straight to JSON print as `to_relaxed` prints the document,
            /// NaN and infinities included.
            #[test]
            fn bson_written_straight_to_json_is_the_relaxed_text(
                fields in prop::collection::vec(("[a-z\"\\\\é]{1,3}", value()), 0..6),
                t in date_ms(),
                odd in prop::sample::select(vec![f64::NAN, -f64::NAN, f64::INFINITY, -0.0, 1e300]),
            ) {
                let mut d: Document = fields.into_iter().collect();
                d.insert("t", DateTime::from_millis(t));
                d.insert("odd", odd);
                let raw = tsbucket::bson::RawDocumentBuf::try_from(&d).unwrap();
                let mut out = Vec::new();
                crate::rawjson::write_relaxed(&raw, &mut out).unwrap();
                prop_assert_eq!(String::from_utf8(out).unwrap(), to_relaxed(d).to_string());
            }
        }

        #[test]
        fn json_outside_the_straight_writers_subset_is_left_to_parse_doc() {
            let mut bytes = Vec::new();
            for text in [
                r#"{"a": 1, "a": 2}"#,
                r#"{"$x": 1}"#,
                r#"{"a": {"b": 1, "$date": 5}}"#,
                r#"{"a": {"$date": "2021-05-19"}}"#,
                r#"{"a": {"$date": 1, "x": 2}}"#,
                r#"{"a": {"$numberDouble": "NaN"}}"#,
                r#"{"a\u0000": 1}"#,
                r#"[1]"#,
                r#"{"a": 1} x"#,
            ] {
                assert!(
                    crate::jsonbson::transcode(text, &mut bytes).is_none(),
                    "{text}"
                );
            }
            // Deep records go to `parse_doc`, which holds them to the exact limit.
            let deep = super::nested(MAX_NESTING + 1, "1");
            assert!(crate::jsonbson::transcode(&deep, &mut bytes).is_none());
            assert!(parse_doc(&deep).is_err());
            let ok = super::nested(100, "[1]");
            assert!(crate::jsonbson::transcode(&ok, &mut bytes).is_some());
            assert_eq!(
                bytes,
                tsbucket::bson::RawDocumentBuf::try_from(&parse_doc(&ok).unwrap())
                    .unwrap()
                    .into_bytes()
            );
        }
    }

    /// Doubles print as the shortest text that names them; reading that text must give the
    /// same double back, or an export and re-import changes the data.
    #[test]
    fn doubles_read_back_exactly() {
        for x in [
            4.686764821622647e262,
            0.1 + 0.2,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            -1.7976931348623155e308,
            2.225073858507201e-308,
        ] {
            let d = doc! {"x": x};
            let text = to_relaxed(d.clone()).to_string();
            let back = parse_doc(&text).unwrap();
            assert_eq!(back.get_f64("x").unwrap().to_bits(), x.to_bits(), "{text}");
        }
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
    fn a_bad_date_is_explained_in_extended_json_terms() {
        let e = parse_doc(r#"{"t": {"$date": "2021-05-19"}}"#).unwrap_err();
        assert!(
            e.contains(r#"the $date "2021-05-19" is not an RFC 3339 date"#) && !e.contains("Kind"),
            "{e}"
        );
        let e = parse_doc(r#"{"n": {"$numberInt": "x"}}"#).unwrap_err();
        assert!(
            e.starts_with("invalid Extended JSON: ") && !e.contains("Kind:"),
            "{e}"
        );
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
