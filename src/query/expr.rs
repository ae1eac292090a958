//! Aggregation expressions of the forms a pipeline may use: constants, field paths (`"$a.b"`),
//! documents and arrays of expressions, `$literal`, and `$dateTrunc`.
//!
//! Evaluation follows MongoDB: a field path through an array yields the array of the values
//! found in its document elements; a missing value is dropped from a document expression and
//! becomes null inside an array expression.

use super::datetrunc::DateTrunc;
use crate::error::{Error, Result};
use bson::{Bson, Document};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Const(Bson),
    /// A field path, without its leading `$`.
    Path(String),
    /// `{name: expr, ...}`.
    Doc(Vec<(String, Expr)>),
    /// `[expr, ...]`.
    Array(Vec<Expr>),
    /// `$dateTrunc`.
    DateTrunc(Box<DateTrunc<Expr>>),
}

/// Where expressions read field paths from.
pub trait Row {
    /// The value at an aggregation field path (`a.b`), `None` when missing.
    fn path(&self, path: &str) -> Option<Bson>;

    /// Calls `f` with the value at `path`, borrowed where the row can lend it.
    fn visit(&self, path: &str, f: &mut dyn FnMut(Option<&Bson>)) {
        f(self.path(path).as_ref());
    }
}

impl Row for Document {
    fn path(&self, path: &str) -> Option<Bson> {
        path_in_doc(self, path)
    }

    fn visit(&self, path: &str, f: &mut dyn FnMut(Option<&Bson>)) {
        visit_in_doc(self, path, f);
    }
}

/// [`path_in_doc`] lending the value instead of cloning it, unless an array lies on the way
/// (then the value is built).
pub fn visit_in_doc(d: &Document, path: &str, f: &mut dyn FnMut(Option<&Bson>)) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    match (d.get(head), rest) {
        (None, _) => f(None),
        (Some(v), None) => f(Some(v)),
        (Some(v), Some(r)) => visit_in_value(v, r, f),
    }
}

/// [`path_in_value`] lending the value where it can.
pub fn visit_in_value(v: &Bson, path: &str, f: &mut dyn FnMut(Option<&Bson>)) {
    match v {
        _ if path.is_empty() => f(Some(v)),
        Bson::Document(d) => visit_in_doc(d, path, f),
        Bson::Array(_) => f(path_in_value(v, path).as_ref()),
        _ => f(None),
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadValue(msg.into())
}

/// The value at `path` in `d` with MongoDB's aggregation rules.
pub fn path_in_doc(d: &Document, path: &str) -> Option<Bson> {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let v = d.get(head)?;
    match rest {
        None => Some(v.clone()),
        Some(r) => path_in_value(v, r),
    }
}

/// The value at `path` below the value `v` (`v` itself when `path` is empty).
pub fn path_in_value(v: &Bson, path: &str) -> Option<Bson> {
    if path.is_empty() {
        return Some(v.clone());
    }
    match v {
        Bson::Document(d) => path_in_doc(d, path),
        Bson::Array(a) => Some(Bson::Array(
            a.iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => path_in_doc(d, path),
                    _ => None,
                })
                .collect(),
        )),
        _ => None,
    }
}

fn parse_path(s: &str) -> Result<String> {
    if s.starts_with("$$") {
        return Err(bad(format!(
            "variables such as '{s}' are not supported in expressions"
        )));
    }
    let p = &s[1..];
    if p.is_empty() || p.split('.').any(|c| c.is_empty() || c.starts_with('$')) {
        return Err(bad(format!("invalid field path '{s}'")));
    }
    Ok(p.to_string())
}

impl Expr {
    /// Parses an expression.
    pub fn parse(v: &Bson) -> Result<Expr> {
        match v {
            Bson::String(s) if s.starts_with('$') => Ok(Expr::Path(parse_path(s)?)),
            Bson::Array(a) => Ok(Expr::Array(
                a.iter().map(Expr::parse).collect::<Result<_>>()?,
            )),
            Bson::Document(d) => match d.keys().next() {
                Some(k) if k.starts_with('$') => {
                    if d.len() != 1 {
                        return Err(bad(format!(
                            "an expression object must hold exactly one operator, found {} \
                             fields starting with '{k}'",
                            d.len()
                        )));
                    }
                    let arg = d.get(k).unwrap_or(&Bson::Null);
                    match k.as_str() {
                        "$literal" => Ok(Expr::Const(arg.clone())),
                        "$dateTrunc" => Ok(Expr::DateTrunc(Box::new(DateTrunc::parse(
                            arg,
                            Expr::parse,
                        )?))),
                        other => Err(bad(format!(
                            "unknown or unsupported expression operator '{other}' \
                             (supported: $dateTrunc, $literal)"
                        ))),
                    }
                }
                _ => {
                    let mut fields = Vec::with_capacity(d.len());
                    for (k, v) in d {
                        if k.starts_with('$') || k.contains('.') || k.is_empty() {
                            return Err(bad(format!(
                                "invalid field name '{k}' in an expression object"
                            )));
                        }
                        fields.push((k.clone(), Expr::parse(v)?));
                    }
                    Ok(Expr::Doc(fields))
                }
            },
            other => Ok(Expr::Const(other.clone())),
        }
    }

    /// Evaluates the expression on `row`; `None` is "missing".
    pub fn eval(&self, row: &dyn Row) -> Result<Option<Bson>> {
        Ok(match self {
            Expr::Const(v) => Some(v.clone()),
            Expr::Path(p) => row.path(p),
            Expr::Doc(fields) => {
                let mut d = Document::new();
                for (k, e) in fields {
                    if let Some(v) = e.eval(row)? {
                        d.insert(k.clone(), v);
                    }
                }
                Some(Bson::Document(d))
            }
            Expr::Array(items) => Some(Bson::Array(
                items
                    .iter()
                    .map(|e| Ok(e.eval(row)?.unwrap_or(Bson::Null)))
                    .collect::<Result<_>>()?,
            )),
            Expr::DateTrunc(t) => t.apply(t.date.eval(row)?)?,
        })
    }

    /// Every field path the expression reads.
    pub fn paths<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Const(_) => {}
            Expr::Path(p) => out.push(p),
            Expr::Doc(fields) => fields.iter().for_each(|(_, e)| e.paths(out)),
            Expr::Array(items) => items.iter().for_each(|e| e.paths(out)),
            Expr::DateTrunc(t) => t.date.paths(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn paths_through_arrays_and_objects() {
        let d = doc! {"a": [{"b": 1}, 5, {"c": 2}, {"b": [3]}], "m": {"h": "x"}};
        let e = Expr::parse(&Bson::String("$a.b".into())).unwrap();
        assert_eq!(
            e.eval(&d).unwrap(),
            Some(Bson::Array(vec![
                Bson::Int32(1),
                Bson::Array(vec![Bson::Int32(3)])
            ]))
        );
        let e = Expr::parse(&Bson::Document(doc! {"h": "$m.h", "z": "$nope"})).unwrap();
        assert_eq!(e.eval(&d).unwrap(), Some(Bson::Document(doc! {"h": "x"})));
        let e = Expr::parse(&Bson::Array(vec!["$nope".into(), "$m.h".into()])).unwrap();
        assert_eq!(
            e.eval(&d).unwrap(),
            Some(Bson::Array(vec![Bson::Null, "x".into()]))
        );
        assert!(Expr::parse(&Bson::String("$$ROOT".into())).is_err());
        assert!(Expr::parse(&Bson::String("$a..b".into())).is_err());
    }

    #[test]
    fn bad_operators_are_bad_value() {
        for spec in [
            doc! {"$dateTrunc": {"date": "$t"}},
            doc! {"$dateTrunc": {"date": "$$NOW", "unit": "hour"}},
            doc! {"$dateAdd": {"startDate": "$t"}},
            doc! {"$add": [1, 2], "$x": 1},
        ] {
            let e = Expr::parse(&Bson::Document(spec.clone())).unwrap_err();
            assert_eq!(e.code(), Some(2), "{spec}");
        }
    }

    #[test]
    fn date_trunc_reads_its_date_from_the_row() {
        let e = Expr::parse(&Bson::Document(
            doc! {"$dateTrunc": {"date": "$t", "unit": "hour"}},
        ))
        .unwrap();
        let t = bson::DateTime::from_millis(3_600_000 + 5);
        let hour = bson::DateTime::from_millis(3_600_000);
        assert_eq!(e.eval(&doc! {"t": t}).unwrap(), Some(Bson::DateTime(hour)));
        assert!(e.eval(&doc! {"t": "x"}).is_err());
        assert_eq!(e.eval(&doc! {}).unwrap(), Some(Bson::Null));
    }
}
