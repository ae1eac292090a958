//! Index definitions: what `create_index` accepts, the default name, and the conversion of a
//! user's key pattern to the bucket form as MongoDB converts it: a key on the meta field (or a
//! path below it) becomes one on `meta`, and a key on any other field `f` becomes two,
//! `control.min.f` then `control.max.f`, in the opposite order when descending.

use crate::error::{Error, Result};
use crate::options::TimeseriesOptions;
use bson::{doc, Bson, Document};

/// Most secondary indexes a collection may have (MongoDB allows 64 including `_id`).
pub const MAX_INDEXES: usize = 63;

/// A secondary index as the user defined it: its name and key pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// Index name (given, or derived from the key pattern).
    pub name: String,
    /// Key pattern in the user's form, e.g. `{"metadata.sensorId": 1, "timestamp": 1}`.
    pub key: Document,
}

impl IndexDef {
    /// `{v: 2, key, name}`: the form `list_indexes` returns.
    pub fn user_doc(&self) -> Document {
        doc! {"v": 2, "key": self.key.clone(), "name": &self.name}
    }

    /// The path below the meta field of the index's leading key when that key is on the meta
    /// field: `Some("")` for the whole meta value, `Some("a.b")` for `meta.a.b`.
    pub fn meta_path(&self, opts: &TimeseriesOptions) -> Option<String> {
        let meta = opts.get_meta_field()?;
        let (field, _) = self.key.iter().next()?;
        if field == meta {
            return Some(String::new());
        }
        field
            .strip_prefix(meta)
            .and_then(|r| r.strip_prefix('.'))
            .map(str::to_string)
    }
}

enum Kind {
    Time,
    Meta(String),
    Measurement,
}

fn kind(field: &str, opts: &TimeseriesOptions) -> Kind {
    if field == opts.get_time_field() {
        return Kind::Time;
    }
    if let Some(m) = opts.get_meta_field() {
        if field == m {
            return Kind::Meta("meta".into());
        }
        if let Some(rest) = field.strip_prefix(m).and_then(|r| r.strip_prefix('.')) {
            return Kind::Meta(format!("meta.{rest}"));
        }
    }
    Kind::Measurement
}

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

/// The key pattern in bucket form: time and measurement fields become `control.min/max`
/// (max first when descending), meta paths move under `meta`. `keys` must have passed
/// [`parse_index`].
pub fn bucket_key(keys: &Document, opts: &TimeseriesOptions) -> Document {
    let mut out = Document::new();
    for (field, v) in keys {
        match kind(field, opts) {
            Kind::Meta(p) => {
                out.insert(p, v.clone());
            }
            Kind::Time | Kind::Measurement => {
                let (min, max) = (
                    format!("control.min.{field}"),
                    format!("control.max.{field}"),
                );
                if number(v).is_some_and(|n| n < 0.0) {
                    out.insert(max, v.clone());
                    out.insert(min, v.clone());
                } else {
                    out.insert(min, v.clone());
                    out.insert(max, v.clone());
                }
            }
        }
    }
    out
}

fn value_name(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 1e15 => format!("{}", *d as i64),
        Bson::Double(d) => d.to_string(),
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// MongoDB's default index name: `field_value` pairs joined by `_`.
fn default_name(keys: &Document) -> String {
    keys.iter()
        .map(|(k, v)| format!("{k}_{}", value_name(v)))
        .collect::<Vec<_>>()
        .join("_")
}

fn cannot(msg: impl Into<String>) -> Error {
    Error::CannotCreateIndex(msg.into())
}

fn check_field(field: &str, v: &Bson, opts: &TimeseriesOptions) -> Result<()> {
    if field.is_empty() || field.split('.').any(str::is_empty) {
        return Err(cannot(format!(
            "index key '{field}' has an empty field name"
        )));
    }
    if field.starts_with('$') {
        return Err(cannot(format!(
            "the field '{field}' is not valid for an index specification"
        )));
    }
    if field == "$**" || field.ends_with(".$**") || field.split('.').any(|p| p.starts_with('$')) {
        return Err(cannot(format!(
            "wildcard and '$' fields ('{field}') cannot be indexed on a time-series collection"
        )));
    }
    if let Some(n) = number(v) {
        if n == 0.0 || n.is_nan() {
            return Err(cannot(format!(
                "values in the index key pattern can't be 0 or NaN (field '{field}')"
            )));
        }
        return Ok(());
    }
    match kind(field, opts) {
        Kind::Time => Err(Error::BadValue(
            "Indexes on the time field must be ascending or descending (numbers only)".into(),
        )),
        Kind::Measurement => match v {
            Bson::String(s) if s == "2dsphere" => Err(cannot(
                "2dsphere indexes on measurement fields are not supported by tsbucket",
            )),
            _ => Err(Error::BadValue(format!(
                "Indexes on measurement fields must be ascending or descending (numbers only) \
                 or '2dsphere'; got {v} for '{field}'"
            ))),
        },
        Kind::Meta(_) => match v {
            Bson::String(s) if s == "text" => Err(Error::InvalidOptions(
                "Text indexes are not supported on time-series collections".into(),
            )),
            Bson::String(s) if s == "2dsphere_bucket" => Err(Error::InvalidOptions(
                "'2dsphere_bucket' is an internal index type and cannot be created directly".into(),
            )),
            Bson::String(s)
                if matches!(s.as_str(), "hashed" | "2d" | "2dsphere" | "geoHaystack") =>
            {
                Err(cannot(format!(
                    "'{s}' indexes on the meta field are not supported by tsbucket"
                )))
            }
            Bson::String(s) => Err(cannot(format!("unknown index plugin '{s}'"))),
            _ => Err(cannot(format!(
                "values in the index key pattern must be numbers or strings; got {v} for '{field}'"
            ))),
        },
    }
}

fn check_options(options: &Document) -> Result<Option<String>> {
    let mut name = None;
    for (k, v) in options {
        match (k.as_str(), v) {
            ("name", Bson::String(s)) if !s.is_empty() => name = Some(s.clone()),
            ("name", _) => {
                return Err(Error::BadValue(
                    "index name must be a non-empty string".into(),
                ))
            }
            ("v", v) if number(v) == Some(2.0) => {}
            ("v", _) => return Err(cannot("only index version 2 is supported")),
            ("unique", Bson::Boolean(false))
            | ("sparse", Bson::Boolean(false))
            | ("hidden", Bson::Boolean(false)) => {}
            ("unique", _) => {
                return Err(Error::InvalidOptions(
                    "Unique indexes are not supported on time-series collections".into(),
                ))
            }
            ("expireAfterSeconds", _) => {
                return Err(Error::InvalidOptions(
                    "TTL indexes are not supported on time-series collections; use the \
                     collection's expireAfterSeconds"
                        .into(),
                ))
            }
            ("sparse" | "partialFilterExpression" | "hidden" | "collation", _) => {
                return Err(cannot(format!(
                    "the index option '{k}' is not supported by tsbucket"
                )))
            }
            _ => {
                return Err(Error::InvalidOptions(format!(
                    "the field '{k}' is not valid for an index specification"
                )))
            }
        }
    }
    Ok(name)
}

/// Validates `keys` and `options` (MongoDB's index options document: `name`, `unique`, ...)
/// against the collection's options and its `existing` indexes. Returns the definition and
/// whether an identical index already exists (then creating it again is a no-op, as in
/// MongoDB).
pub fn parse_index(
    keys: &Document,
    options: &Document,
    opts: &TimeseriesOptions,
    existing: &[IndexDef],
) -> Result<(IndexDef, bool)> {
    if keys.is_empty() {
        return Err(cannot("Index keys cannot be an empty object."));
    }
    for (field, v) in keys {
        check_field(field, v, opts)?;
    }
    let name = check_options(options)?.unwrap_or_else(|| default_name(keys));
    let def = IndexDef {
        name,
        key: keys.clone(),
    };
    if let Some(e) = existing.iter().find(|e| e.name == def.name) {
        if e.key == def.key {
            return Ok((def, true));
        }
        return Err(Error::IndexKeySpecsConflict(format!(
            "'{}' has key {}, requested {}",
            e.name, e.key, def.key
        )));
    }
    if let Some(e) = existing.iter().find(|e| e.key == def.key) {
        return Err(Error::IndexOptionsConflict(format!(
            "{} exists as '{}', requested as '{}'",
            e.key, e.name, def.name
        )));
    }
    if existing.len() >= MAX_INDEXES {
        return Err(cannot(format!(
            "add index fails, too many indexes (at most {MAX_INDEXES} besides _id)"
        )));
    }
    Ok((def, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TimeseriesOptions {
        TimeseriesOptions::new("t").meta_field("m")
    }

    fn conv(keys: Document) -> Document {
        parse_index(&keys, &Document::new(), &opts(), &[]).unwrap();
        bucket_key(&keys, &opts())
    }

    /// MongoDB's conversion of each kind of key, row by row (key order matters).
    #[test]
    fn conversion_table() {
        let rows = [
            (doc! {"t": 1}, doc! {"control.min.t": 1, "control.max.t": 1}),
            (
                doc! {"t": -1},
                doc! {"control.max.t": -1, "control.min.t": -1},
            ),
            (doc! {"m": 1}, doc! {"meta": 1}),
            (doc! {"m": -1}, doc! {"meta": -1}),
            (doc! {"m.a": 1}, doc! {"meta.a": 1}),
            (doc! {"m.a": -1}, doc! {"meta.a": -1}),
            (doc! {"x": 1}, doc! {"control.min.x": 1, "control.max.x": 1}),
            (
                doc! {"x": -1},
                doc! {"control.max.x": -1, "control.min.x": -1},
            ),
            (
                doc! {"m.tag1": 1, "t": -1},
                doc! {"meta.tag1": 1, "control.max.t": -1, "control.min.t": -1},
            ),
        ];
        for (user, bucket) in rows {
            let got = conv(user.clone());
            assert_eq!(got, bucket, "{user}");
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                bucket.keys().collect::<Vec<_>>(),
                "{user}"
            );
        }
    }

    /// A compound key on a meta path and a descending time, with other field names:
    /// `{mm.tag1: 1, tm: -1}` → `{meta.tag1: 1, control.max.tm: -1, control.min.tm: -1}`.
    #[test]
    fn at_21_conversion() {
        let o = TimeseriesOptions::new("tm").meta_field("mm");
        let k = doc! {"mm.tag1": 1, "tm": -1};
        let (def, dup) = parse_index(&k, &Document::new(), &o, &[]).unwrap();
        assert!(!dup);
        assert_eq!(def.name, "mm.tag1_1_tm_-1");
        assert_eq!(
            bucket_key(&k, &o),
            doc! {"meta.tag1": 1, "control.max.tm": -1, "control.min.tm": -1}
        );
    }

    #[test]
    fn default_names() {
        let o = TimeseriesOptions::new("timestamp").meta_field("metadata");
        let k = doc! {"metadata.sensorId": 1, "timestamp": 1};
        let (def, _) = parse_index(&k, &Document::new(), &o, &[]).unwrap();
        assert_eq!(def.name, "metadata.sensorId_1_timestamp_1");
        let (def, _) = parse_index(&doc! {"x": -1.0}, &Document::new(), &o, &[]).unwrap();
        assert_eq!(def.name, "x_-1");
    }

    #[test]
    fn meta_path_of_leading_key() {
        let d = |k: Document| IndexDef {
            name: "n".into(),
            key: k,
        };
        assert_eq!(d(doc! {"m": 1}).meta_path(&opts()), Some(String::new()));
        assert_eq!(
            d(doc! {"m.a.b": 1, "t": 1}).meta_path(&opts()),
            Some("a.b".into())
        );
        assert_eq!(d(doc! {"t": 1, "m": 1}).meta_path(&opts()), None);
        assert_eq!(d(doc! {"mx": 1}).meta_path(&opts()), None);
    }

    #[test]
    fn refusals_carry_mongodb_codes() {
        let code = |k: Document, o: Document| {
            parse_index(&k, &o, &opts(), &[])
                .unwrap_err()
                .code()
                .unwrap()
        };
        let none = Document::new();
        assert_eq!(code(doc! {}, none.clone()), 67);
        assert_eq!(code(doc! {"$natural": 1}, none.clone()), 67);
        assert_eq!(code(doc! {"$hint": 1}, none.clone()), 67);
        assert_eq!(code(doc! {"$**": 1}, none.clone()), 67);
        assert_eq!(code(doc! {"m.$**": 1}, none.clone()), 67);
        assert_eq!(code(doc! {"x": 1}, doc! {"unique": true}), 72);
        assert_eq!(code(doc! {"m": "text"}, none.clone()), 72);
        assert_eq!(code(doc! {"x": "text"}, none.clone()), 2);
        assert_eq!(code(doc! {"t": "hashed"}, none.clone()), 2);
        assert_eq!(code(doc! {"t": "text"}, none.clone()), 2);
        assert_eq!(code(doc! {"m": "hashed"}, none.clone()), 67);
        assert_eq!(code(doc! {"m": "2dsphere_bucket"}, none.clone()), 72);
        assert_eq!(code(doc! {"x": "2dsphere"}, none.clone()), 67);
        assert_eq!(code(doc! {"x": 0}, none.clone()), 67);
        assert_eq!(code(doc! {"m": true}, none.clone()), 67);
        assert_eq!(code(doc! {"x": 1}, doc! {"expireAfterSeconds": 10}), 72);
        assert_eq!(code(doc! {"x": 1}, doc! {"sparse": true}), 67);
        assert_eq!(
            code(doc! {"x": 1}, doc! {"partialFilterExpression": {"m": 1}}),
            67
        );
        assert_eq!(code(doc! {"x": 1}, doc! {"bogus": 1}), 72);
        let e = parse_index(&doc! {"t": "2d"}, &none, &opts(), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad value: Indexes on the time field must be ascending or descending (numbers only)"
        );
    }

    #[test]
    fn duplicates() {
        let none = Document::new();
        let (a, _) = parse_index(&doc! {"m": 1}, &none, &opts(), &[]).unwrap();
        let existing = [a];
        let (_, dup) = parse_index(&doc! {"m": 1}, &none, &opts(), &existing).unwrap();
        assert!(dup);
        let e = parse_index(&doc! {"m": -1}, &doc! {"name": "m_1"}, &opts(), &existing);
        assert_eq!(e.unwrap_err().code(), Some(86));
        let e = parse_index(&doc! {"m": 1}, &doc! {"name": "other"}, &opts(), &existing);
        assert_eq!(e.unwrap_err().code(), Some(85));
    }
}
