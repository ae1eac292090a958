//! Extended JSON in and out: arguments and JSON Lines records parse as relaxed or canonical
//! Extended JSON; documents print as relaxed Extended JSON (what mongoexport writes).

use crate::CliResult;
use serde_json::Value;
use tsbucket::bson::{Bson, Document};

/// Parses one JSON object in relaxed or canonical Extended JSON.
pub fn parse_doc(text: &str) -> Result<Document, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    value_to_doc(v)
}

/// Parses an argument that must hold a JSON object, naming the argument in the error.
pub fn doc_arg(what: &str, text: &str) -> CliResult<Document> {
    parse_doc(text).map_err(|e| format!("{what}: {e}").into())
}

/// Parses a pipeline argument: a JSON array of stage objects, or a single stage object.
pub fn pipeline_arg(text: &str) -> CliResult<Vec<Document>> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("pipeline: invalid JSON: {e}"))?;
    let stages = match v {
        Value::Array(stages) => stages,
        v @ Value::Object(_) => vec![v],
        _ => return Err("pipeline: expected an array of stage documents".into()),
    };
    stages
        .into_iter()
        .enumerate()
        .map(|(i, s)| value_to_doc(s).map_err(|e| format!("pipeline stage {i}: {e}").into()))
        .collect()
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

    #[test]
    fn non_objects_are_refused() {
        assert!(parse_doc("[1]").unwrap_err().contains("an array"));
        assert!(parse_doc("{").unwrap_err().contains("invalid JSON"));
        assert_eq!(pipeline_arg(r#"{"$count": "n"}"#).unwrap().len(), 1);
        assert!(pipeline_arg("3").is_err());
    }
}
