//! Values as relaxed Extended JSON (MongoDB Extended JSON v2), shared by the `tsbucket` and
//! `segment-dump` binaries.
//!
//! The `bson` crate's `into_relaxed_extjson` decides whether a date fits the ISO-8601 form
//! from a calendar date that it clamps to the year 9999: every date from the year 10000 on
//! printed as `9999-12-31T23:59:59.999999999Z`, which reads back as another date. Dates are
//! written here instead, everywhere in a value; the crate writes everything else.

use serde_json::{json, Value};
use tsbucket::bson::{Bson, DateTime, JavaScriptCodeWithScope};

/// The first millisecond of the year 10000. The spec writes a date as an ISO-8601 string
/// only for the years 1970 through 9999.
pub const YEAR_10000_MS: i64 = 253_402_300_800_000;

/// `v` as relaxed Extended JSON: dates of the years 1970 through 9999 as
/// `{"$date": "<ISO-8601>"}`, other dates as `{"$date": {"$numberLong": "<ms>"}}`.
pub fn relaxed(v: Bson) -> Value {
    match v {
        Bson::DateTime(t) => date(t),
        Bson::Document(d) => Value::Object(d.into_iter().map(|(k, v)| (k, relaxed(v))).collect()),
        Bson::Array(a) => Value::Array(a.into_iter().map(relaxed).collect()),
        Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope }) => json!({
            "$code": code,
            "$scope": relaxed(Bson::Document(scope)),
        }),
        other => other.into_relaxed_extjson(),
    }
}

/// A date as relaxed Extended JSON.
pub fn date(t: DateTime) -> Value {
    let ms = t.timestamp_millis();
    if (0..YEAR_10000_MS).contains(&ms) {
        if let Ok(iso) = t.try_to_rfc3339_string() {
            return json!({ "$date": iso });
        }
    }
    json!({ "$date": { "$numberLong": ms.to_string() } })
}
