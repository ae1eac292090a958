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
/// (which `import --time-unit ms` reads back). The `bson` crate formats the dates from the year 10000
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

/// How the columns of a CSV file become a document: the document's fields in the order the
/// header first names them, nested fields as subdocuments, each leaf a column. A row is
/// written as BSON bytes straight from its cells.
pub struct RowSchema {
    fields: Fields,
    times: TimeRead,
}

/// The fields of a document: each key (as a BSON C string) with a column or subdocument.
type Fields = Vec<(Vec<u8>, Node)>;

enum Node {
    /// The column at this index, read as its kind says.
    Leaf(usize, Kind),
    Doc(Fields),
}

#[derive(Clone)]
enum Kind {
    Time,
    Meta,
    Typed(Cast),
}

/// A column's type, as mongoimport's `--columnsHaveTypes` names it in the header
/// (`name.int64()`); `Auto` types each cell by its content.
#[derive(Clone, Debug, PartialEq)]
enum Cast {
    Auto,
    Str,
    Int32,
    Int64,
    Double,
    Decimal,
    Bool,
    /// RFC 3339 (or the import's time options), or this `strftime` format.
    Date(Option<String>),
}

/// A header cell `name.type()` as the name and its type.
fn typed_name(h: &str) -> Result<(&str, Cast), String> {
    let bad = || {
        format!(
            "column '{h}' names no type: with --columns-have-types a column is \
             name.type(), type one of auto string int32 int64 double decimal boolean \
             date date(FORMAT)"
        )
    };
    let open = h.rfind(".").ok_or_else(bad)?;
    let (name, ty) = (
        h.get(..open).unwrap_or_default(),
        h.get(open + 1..).unwrap_or_default(),
    );
    let (ty, arg) = ty
        .strip_suffix(')')
        .and_then(|t| t.split_once('('))
        .ok_or_else(bad)?;
    let cast = match (ty, arg) {
        ("auto", "") => Cast::Auto,
        ("string", "") => Cast::Str,
        ("int32", "") => Cast::Int32,
        ("int64", "") => Cast::Int64,
        ("double", "") => Cast::Double,
        ("decimal", "") => Cast::Decimal,
        ("boolean", "") => Cast::Bool,
        ("date", "") => Cast::Date(None),
        ("date" | "date_ms", f) => Cast::Date(Some(f.to_string())),
        _ => return Err(bad()),
    };
    match name.is_empty() {
        true => Err(bad()),
        false => Ok((name, cast)),
    }
}

enum Column {
    Time(String),
    Meta(Vec<String>, Cast),
    Typed(Vec<String>, Cast),
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
    /// Header cells are `name.type()`.
    pub columns_have_types: bool,
}

impl RowSchema {
    /// The schema of a file with this header.
    pub fn new(header: &csv::StringRecord, o: &CsvOptions) -> Result<RowSchema, String> {
        let named: Vec<(&str, Cast)> = header
            .iter()
            .map(|h| match o.columns_have_types {
                true => typed_name(h),
                false => Ok((h, Cast::Auto)),
            })
            .collect::<Result<_, String>>()?;
        if !named.iter().any(|(h, _)| *h == o.time_column) {
            return Err(format!(
                "the header has no time column '{}' (set it with --time-column)",
                o.time_column
            ));
        }
        let meta_prefix = o.meta_field.as_ref().map(|m| format!("{m}."));
        let columns = named
            .iter()
            .map(|(h, cast)| {
                let h = *h;
                if h == o.time_column {
                    return Ok(Column::Time(o.time_field.clone()));
                }
                if o.meta_columns.iter().any(|m| m == h) {
                    let meta = o.meta_field.as_ref().ok_or_else(|| {
                        "--meta-columns needs a collection with a meta field".to_string()
                    })?;
                    return Ok(Column::Meta(split(&format!("{meta}.{h}")), cast.clone()));
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
                    Column::Meta(path, cast.clone())
                } else {
                    Column::Typed(path, cast.clone())
                })
            })
            .collect::<Result<Vec<Column>, String>>()?;
        let mut fields = Fields::new();
        for (i, c) in columns.iter().enumerate() {
            let (path, kind) = match c {
                Column::Time(f) => (std::slice::from_ref(f), Kind::Time),
                // Meta subfields are strings unless the header types them.
                Column::Meta(p, Cast::Auto) => (p.as_slice(), Kind::Meta),
                Column::Meta(p, c) | Column::Typed(p, c) => (p.as_slice(), Kind::Typed(c.clone())),
            };
            place(&mut fields, path, Node::Leaf(i, kind))?;
        }
        Ok(RowSchema {
            fields,
            times: o.times.clone(),
        })
    }

    /// The document of one row, as BSON bytes.
    pub fn row_bson(&self, rec: &csv::StringRecord, out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        self.write_fields(&self.fields, rec, out)?;
        Ok(())
    }

    /// A cell of a column of a stated type; a cell that is not of it is an error.
    fn cast_element(
        &self,
        out: &mut Vec<u8>,
        key: &[u8],
        text: &str,
        c: &Cast,
    ) -> Result<(), String> {
        let not = |ty: &str| format!("'{text}' is not {ty}");
        match c {
            Cast::Auto => typed_element(out, key, text),
            Cast::Str => string(out, key, text),
            Cast::Int32 => {
                let i: i32 = text.trim().parse().map_err(|_| not("an int32"))?;
                element(out, 0x10, key);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Cast::Int64 => {
                let i: i64 = text.trim().parse().map_err(|_| not("an int64"))?;
                element(out, 0x12, key);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Cast::Double => {
                let f: f64 = text.trim().parse().map_err(|_| not("a double"))?;
                element(out, 0x01, key);
                out.extend_from_slice(&f.to_le_bytes());
            }
            Cast::Decimal => {
                let d: tsbucket::bson::Decimal128 =
                    text.trim().parse().map_err(|_| not("a decimal"))?;
                element(out, 0x13, key);
                out.extend_from_slice(&d.bytes());
            }
            Cast::Bool => {
                let b = match text.trim() {
                    "true" | "TRUE" | "True" | "1" => true,
                    "false" | "FALSE" | "False" | "0" => false,
                    _ => return Err(not("a boolean")),
                };
                element(out, 0x08, key);
                out.push(u8::from(b));
            }
            Cast::Date(format) => {
                let times = match format {
                    Some(f) => TimeRead {
                        unit: self.times.unit,
                        format: Some(f.clone()),
                    },
                    None => self.times.clone(),
                };
                let t = times.text(text)?;
                element(out, 0x09, key);
                out.extend_from_slice(&t.timestamp_millis().to_le_bytes());
            }
        }
        Ok(())
    }

    /// Writes the document of `fields` to `out`; false when it has no field (every cell
    /// under it empty).
    fn write_fields(
        &self,
        fields: &Fields,
        rec: &csv::StringRecord,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut any = false;
        for (key, node) in fields {
            let at = out.len();
            match node {
                Node::Leaf(col, kind) => {
                    let text = rec.get(*col).unwrap_or_default();
                    if text.is_empty() {
                        continue;
                    }
                    match kind {
                        Kind::Time => {
                            let t = self.times.text(text)?;
                            element(out, 0x09, key);
                            out.extend_from_slice(&t.timestamp_millis().to_le_bytes());
                        }
                        Kind::Meta => string(out, key, text),
                        Kind::Typed(Cast::Auto) => typed_element(out, key, text),
                        Kind::Typed(c) => self.cast_element(out, key, text, c)?,
                    }
                }
                Node::Doc(sub) => {
                    element(out, 0x03, key);
                    if !self.write_fields(sub, rec, out)? {
                        out.truncate(at);
                        continue;
                    }
                }
            }
            any = true;
        }
        out.push(0);
        let len = i32::try_from(out.len() - start)
            .map_err(|_| "the row is larger than a BSON document can be".to_string())?;
        if let Some(head) = out.get_mut(start..start + 4) {
            head.copy_from_slice(&len.to_le_bytes());
        }
        Ok(any)
    }
}

fn split(name: &str) -> Vec<String> {
    name.split('.').map(str::to_string).collect()
}

/// Starts an element of BSON type `tag` named `key` (a C string).
fn element(out: &mut Vec<u8>, tag: u8, key: &[u8]) {
    out.push(tag);
    out.extend_from_slice(key);
}

/// A string element.
fn string(out: &mut Vec<u8>, key: &[u8], s: &str) {
    element(out, 0x02, key);
    // A CSV cell is far below 2 GiB: the csv crate holds a record in memory.
    out.extend_from_slice(&(s.len() as i32 + 1).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A cell typed by its content: `true`/`false`, an int64, a double, else a string.
fn typed_element(out: &mut Vec<u8>, key: &[u8], s: &str) {
    match s {
        "true" | "false" => {
            element(out, 0x08, key);
            out.push(u8::from(s == "true"));
            return;
        }
        _ => {}
    }
    // Rust also parses words such as "inf" and "NaN"; only text that looks numeric is a number.
    let numeric = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'-' || b == b'+' || b == b'.');
    if numeric {
        if let Ok(i) = s.parse::<i64>() {
            element(out, 0x12, key);
            out.extend_from_slice(&i.to_le_bytes());
            return;
        }
        if let Ok(f) = s.parse::<f64>() {
            element(out, 0x01, key);
            out.extend_from_slice(&f.to_le_bytes());
            return;
        }
    }
    string(out, key, s);
}

/// Puts `leaf` at `path` in `fields`, making the subdocuments on the way.
fn place(fields: &mut Fields, path: &[String], leaf: Node) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let key = |name: &str| -> Result<Vec<u8>, String> {
        match name.contains('\0') {
            true => Err(format!(
                "column '{}' has a NUL character in its name",
                path.join(".")
            )),
            false => Ok([name.as_bytes(), &[0]].concat()),
        }
    };
    let mut level = fields;
    for p in parents {
        let k = key(p)?;
        let at = match level.iter().position(|(n, _)| *n == k) {
            Some(at) => at,
            None => {
                level.push((k, Node::Doc(Fields::new())));
                level.len() - 1
            }
        };
        level = match level.get_mut(at) {
            Some((_, Node::Doc(sub))) => sub,
            _ => return Err(format!("column '{}' nests under a value", path.join("."))),
        };
    }
    let k = key(last)?;
    if level.iter().any(|(n, _)| *n == k) {
        return Err(format!(
            "column '{}' appears twice, or holds a value where other columns nest",
            path.join(".")
        ));
    }
    level.push((k, leaf));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::times::TimeUnit;
    use tsbucket::bson::doc;

    /// The document of a row, through its BSON bytes.
    fn doc_of(schema: &RowSchema, rec: &csv::StringRecord) -> Result<Document, String> {
        let mut bytes = Vec::new();
        schema.row_bson(rec, &mut bytes)?;
        Ok(Document::from_reader(bytes.as_slice()).unwrap())
    }

    /// [`opts`] reading epoch numbers as milliseconds.
    fn opts_ms() -> CsvOptions {
        CsvOptions {
            times: TimeRead {
                unit: Some(TimeUnit::Ms),
                format: None,
            },
            ..opts()
        }
    }

    fn opts() -> CsvOptions {
        CsvOptions {
            time_column: "time".into(),
            time_field: "time".into(),
            meta_field: Some("tags".into()),
            meta_columns: vec!["host".into()],
            times: TimeRead::default(),
            delimiter: b',',
            columns_have_types: false,
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
        assert_eq!(doc_of(&schema, &row).unwrap(), d);
    }

    #[test]
    fn typing_by_content_and_absent_cells() {
        let header = csv::StringRecord::from(vec!["time", "host", "a", "b", "c", "d"]);
        let row = csv::StringRecord::from(vec!["1000", "h1", "-7", "1.5e3", "", "inf"]);
        let ms = opts_ms();
        let schema = RowSchema::new(&header, &ms).unwrap();
        assert_eq!(
            doc_of(&schema, &row).unwrap(),
            doc! {"time": DateTime::from_millis(1000), "tags": {"host": "h1"}, "a": -7_i64, "b": 1500.0, "d": "inf"}
        );
        let bad = csv::StringRecord::from(vec!["yesterday", "h", "", "", "", ""]);
        assert!(doc_of(&schema, &bad).unwrap_err().contains("yesterday"));
        // Without a unit, 1000 is refused rather than read as a time in 1970.
        let schema = RowSchema::new(&header, &opts()).unwrap();
        assert!(doc_of(&schema, &row).unwrap_err().contains("--time-unit"));
    }

    /// Times of every year, and those RFC 3339 cannot write, read back as they were written
    /// (the milliseconds with `--time-unit ms`).
    #[test]
    fn times_outside_four_digit_years_are_written_as_milliseconds() {
        let header = csv::StringRecord::from(vec!["time"]);
        let ms = opts_ms();
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
            assert_eq!(doc_of(&schema, &row).unwrap(), d, "{text}");
        }
        let nested = doc! {"a": [DateTime::from_millis(i64::MAX)]};
        assert_eq!(
            flatten(&nested)[0].1,
            r#"[{"$date":{"$numberLong":"9223372036854775807"}}]"#
        );
    }

    #[test]
    fn subdocuments_of_empty_cells_are_left_out_and_clashing_columns_refused() {
        let header = csv::StringRecord::from(vec!["time", "tags.a", "v", "tags.b", "x.y.z"]);
        let schema = RowSchema::new(&header, &opts()).unwrap();
        let t = "2016-01-01T00:00:00Z";
        let got = doc_of(&schema, &csv::StringRecord::from(vec![t, "", "1", "", ""])).unwrap();
        let time = DateTime::from_millis(1_451_606_400_000);
        assert_eq!(got, doc! {"time": time, "v": 1_i64});
        let got = doc_of(&schema, &csv::StringRecord::from(vec![t, "", "", "b", "s"])).unwrap();
        assert_eq!(
            got,
            doc! {"time": time, "tags": {"b": "b"}, "x": {"y": {"z": "s"}}}
        );
        for clash in [
            vec!["time", "a", "a.b"],
            vec!["time", "a.b", "a"],
            vec!["time", "a", "a"],
        ] {
            let e = RowSchema::new(&csv::StringRecord::from(clash.clone()), &opts())
                .err()
                .unwrap();
            assert!(e.contains("column 'a"), "{clash:?}: {e}");
        }
    }

    #[test]
    fn headers_may_state_each_columns_type() {
        let header = csv::StringRecord::from(vec![
            "time.date()",
            "tags.rack.int32()",
            "tags.host.auto()",
            "n.int64()",
            "x.double()",
            "d.decimal()",
            "ok.boolean()",
            "s.string()",
            "day.date(%d/%m/%Y)",
        ]);
        let typed = CsvOptions {
            columns_have_types: true,
            ..opts()
        };
        let schema = RowSchema::new(&header, &typed).unwrap();
        let row = csv::StringRecord::from(vec![
            "2016-01-01T00:00:00Z",
            "12",
            "h1",
            "7",
            "3",
            "1.50",
            "false",
            "42",
            "02/01/2016",
        ]);
        let got = doc_of(&schema, &row).unwrap();
        assert_eq!(
            got,
            doc! {
                "time": DateTime::from_millis(1_451_606_400_000),
                "tags": {"rack": 12, "host": "h1"},
                "n": 7_i64, "x": 3.0, "d": "1.50".parse::<tsbucket::bson::Decimal128>().unwrap(),
                "ok": false, "s": "42", "day": DateTime::from_millis(1_451_692_800_000),
            }
        );
        let bad = csv::StringRecord::from(vec![
            "2016-01-01T00:00:00Z",
            "x",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
        ]);
        assert!(doc_of(&schema, &bad)
            .unwrap_err()
            .contains("'x' is not an int32"));
        for header in [vec!["time.date()", "a"], vec!["time.date()", "a.float()"]] {
            let e = RowSchema::new(&csv::StringRecord::from(header), &typed)
                .err()
                .unwrap();
            assert!(e.contains("names no type"), "{e}");
        }
    }

    #[test]
    fn a_missing_time_column_is_reported() {
        let header = csv::StringRecord::from(vec!["t", "a"]);
        let e = RowSchema::new(&header, &opts()).err().unwrap();
        assert!(e.contains("--time-column"));
    }
}
