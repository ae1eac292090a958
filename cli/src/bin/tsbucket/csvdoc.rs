//! Documents as CSV rows. Writing flattens nested documents into dotted column names and
//! writes dates as RFC 3339 (as epoch milliseconds outside the years 0000 through 9999).
//! Reading types each cell by its content: the time column as a date (see [`TimeRead`]), meta
//! columns as strings, other cells as int64, double, bool or string; an empty cell leaves the
//! field out.

use crate::times::TimeRead;
use tsbucket::bson::{Bson, DateTime, Document};

/// `doc`'s leaf fields as (dotted path, cell text), in document order.
pub fn flatten(doc: &Document) -> Vec<(String, String)> {
    let mut out = Vec::new();
    flatten_into("", doc, &mut out);
    out
}

fn flatten_into(prefix: &str, doc: &Document, out: &mut Vec<(String, String)>) {
    for (k, v) in doc {
        let path = format!("{prefix}{k}");
        match v {
            Bson::Document(d) => flatten_into(&format!("{path}."), d, out),
            v => out.push((path, cell(v))),
        }
    }
}

fn cell(v: &Bson) -> String {
    match v {
        Bson::String(s) => s.clone(),
        Bson::DateTime(t) => date_cell(*t),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(f) => double_cell(*f),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => String::new(),
        Bson::ObjectId(o) => o.to_hex(),
        other => crate::extjson::relaxed(other.clone()).to_string(),
    }
}

/// The first millisecond of the year 0. RFC 3339 has four-digit years: 0000 through 9999.
const YEAR_0_MS: i64 = -62_167_219_200_000;

/// A date's text: RFC 3339 where its year has four digits, else integer epoch milliseconds
/// (which [`parse_time`] reads too). The `bson` crate formats the dates from the year 10000
/// on as the last instant of 9999, so it is not asked for them.
fn date_cell(t: DateTime) -> String {
    let ms = t.timestamp_millis();
    (YEAR_0_MS..crate::extjson::YEAR_10000_MS)
        .contains(&ms)
        .then(|| t.try_to_rfc3339_string().ok())
        .flatten()
        .unwrap_or_else(|| ms.to_string())
}

/// A double's text, with a fraction or exponent even when integral, so that reading it back
/// gives a double again rather than an integer.
fn double_cell(f: f64) -> String {
    let s = f.to_string();
    if f.is_finite() && !s.contains(['.', 'e', 'E']) {
        s + ".0"
    } else {
        s
    }
}

/// How the columns of a CSV file become a document.
pub struct RowSchema {
    columns: Vec<Column>,
    times: TimeRead,
}

enum Column {
    Time(String),
    Meta(Vec<String>),
    Typed(Vec<String>),
}

/// Options for reading CSV.
#[derive(Clone)]
pub struct CsvOptions {
    /// Column holding the time; its field is the collection's time field.
    pub time_column: String,
    /// The collection's time field.
    pub time_field: String,
    /// The collection's meta field, if any.
    pub meta_field: Option<String>,
    /// Columns that become subfields of the meta field.
    pub meta_columns: Vec<String>,
    /// How the time column is read.
    pub times: TimeRead,
    /// The byte between fields.
    pub delimiter: u8,
}

impl RowSchema {
    /// The schema of a file with this header.
    pub fn new(header: &csv::StringRecord, o: &CsvOptions) -> Result<RowSchema, String> {
        if !header.iter().any(|h| h == o.time_column) {
            return Err(format!(
                "the header has no time column '{}' (set it with --time-column)",
                o.time_column
            ));
        }
        let meta_prefix = o.meta_field.as_ref().map(|m| format!("{m}."));
        let columns = header
            .iter()
            .map(|h| {
                if h == o.time_column {
                    return Ok(Column::Time(o.time_field.clone()));
                }
                if o.meta_columns.iter().any(|m| m == h) {
                    let meta = o.meta_field.as_ref().ok_or_else(|| {
                        "--meta-columns needs a collection with a meta field".to_string()
                    })?;
                    return Ok(Column::Meta(split(&format!("{meta}.{h}"))));
                }
                let path = split(h);
                if path.iter().any(String::is_empty) {
                    return Err(format!("column name '{h}' has an empty path component"));
                }
                let is_meta = o.meta_field.as_deref() == Some(h)
                    || meta_prefix
                        .as_ref()
                        .is_some_and(|p| h.starts_with(p.as_str()));
                Ok(if is_meta {
                    Column::Meta(path)
                } else {
                    Column::Typed(path)
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(RowSchema {
            columns,
            times: o.times.clone(),
        })
    }

    /// The document of one row.
    pub fn row(&self, rec: &csv::StringRecord) -> Result<Document, String> {
        let mut doc = Document::new();
        for (col, text) in self.columns.iter().zip(rec.iter()) {
            if text.is_empty() {
                continue;
            }
            let (path, v) = match col {
                Column::Time(f) => (
                    std::slice::from_ref(f),
                    Bson::DateTime(self.times.text(text)?),
                ),
                Column::Meta(p) => (p.as_slice(), Bson::String(text.to_string())),
                Column::Typed(p) => (p.as_slice(), typed(text)),
            };
            insert_path(&mut doc, path, v)?;
        }
        Ok(doc)
    }
}

fn split(name: &str) -> Vec<String> {
    name.split('.').map(str::to_string).collect()
}

fn typed(s: &str) -> Bson {
    match s {
        "true" => return Bson::Boolean(true),
        "false" => return Bson::Boolean(false),
        _ => {}
    }
    // Rust also parses words such as "inf" and "NaN"; only text that looks numeric is a number.
    let numeric = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'-' || b == b'+' || b == b'.');
    if numeric {
        if let Ok(i) = s.parse::<i64>() {
            return Bson::Int64(i);
        }
        if let Ok(f) = s.parse::<f64>() {
            return Bson::Double(f);
        }
    }
    Bson::String(s.to_string())
}

fn insert_path(doc: &mut Document, path: &[String], v: Bson) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut d = doc;
    for p in parents {
        let e = d
            .entry(p.clone())
            .or_insert_with(|| Bson::Document(Document::new()));
        d = match e {
            Bson::Document(sub) => sub,
            _ => return Err(format!("column '{}' nests under a value", path.join("."))),
        };
    }
    if d.contains_key(last) {
        return Err(format!("column '{}' appears twice", path.join(".")));
    }
    d.insert(last.clone(), v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::times::TimeUnit;
    use tsbucket::bson::doc;

    fn opts() -> CsvOptions {
        CsvOptions {
            time_column: "time".into(),
            time_field: "time".into(),
            meta_field: Some("tags".into()),
            meta_columns: vec!["host".into()],
            times: TimeRead::default(),
            delimiter: b',',
        }
    }

    #[test]
    fn flatten_then_read_back() {
        let d = doc! {
            "time": DateTime::from_millis(1_451_606_400_000),
            "tags": {"hostname": "host_1", "rack": "12"},
            "n": 3_i64, "x": 2.0, "ok": true, "s": "hello",
        };
        let flat = flatten(&d);
        assert_eq!(flat[0], ("time".into(), "2016-01-01T00:00:00Z".into()));
        assert_eq!(flat[2], ("tags.rack".into(), "12".into()));
        let header =
            csv::StringRecord::from(flat.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>());
        let row = csv::StringRecord::from(flat.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>());
        let schema = RowSchema::new(&header, &opts()).unwrap();
        assert_eq!(schema.row(&row).unwrap(), d);
    }

    #[test]
    fn typing_by_content_and_absent_cells() {
        let header = csv::StringRecord::from(vec!["time", "host", "a", "b", "c", "d"]);
        let row = csv::StringRecord::from(vec!["1000", "h1", "-7", "1.5e3", "", "inf"]);
        let ms = CsvOptions {
            times: TimeRead {
                unit: Some(TimeUnit::Ms),
                format: None,
            },
            ..opts()
        };
        let schema = RowSchema::new(&header, &ms).unwrap();
        assert_eq!(
            schema.row(&row).unwrap(),
            doc! {"time": DateTime::from_millis(1000), "tags": {"host": "h1"}, "a": -7_i64, "b": 1500.0, "d": "inf"}
        );
        let bad = csv::StringRecord::from(vec!["yesterday", "h", "", "", "", ""]);
        assert!(schema.row(&bad).unwrap_err().contains("yesterday"));
        // Without a unit, 1000 is refused rather than read as a time in 1970.
        let schema = RowSchema::new(&header, &opts()).unwrap();
        assert!(schema.row(&row).unwrap_err().contains("--time-unit"));
    }

    /// Times of every year, and those RFC 3339 cannot write, read back as they were written
    /// (the milliseconds with `--time-unit ms`).
    #[test]
    fn times_outside_four_digit_years_are_written_as_milliseconds() {
        let header = csv::StringRecord::from(vec!["time"]);
        let ms = CsvOptions {
            times: TimeRead {
                unit: Some(TimeUnit::Ms),
                format: None,
            },
            ..opts()
        };
        let schema = RowSchema::new(&header, &ms).unwrap();
        let cases = [
            (i64::MIN, "-9223372036854775808"),
            (YEAR_0_MS - 1, "-62167219200001"),
            (YEAR_0_MS, "0000-01-01T00:00:00Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (0, "1970-01-01T00:00:00Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "253402300800000"),
            (i64::MAX, "9223372036854775807"),
        ];
        for (ms, text) in cases {
            let d = doc! {"time": DateTime::from_millis(ms)};
            assert_eq!(flatten(&d), [("time".to_string(), text.to_string())]);
            let row = csv::StringRecord::from(vec![text]);
            assert_eq!(schema.row(&row).unwrap(), d, "{text}");
        }
        let nested = doc! {"a": [DateTime::from_millis(i64::MAX)]};
        assert_eq!(
            flatten(&nested)[0].1,
            r#"[{"$date":{"$numberLong":"9223372036854775807"}}]"#
        );
    }

    #[test]
    fn a_missing_time_column_is_reported() {
        let header = csv::StringRecord::from(vec!["t", "a"]);
        let e = RowSchema::new(&header, &opts()).err().unwrap();
        assert!(e.contains("--time-column"));
    }
}
