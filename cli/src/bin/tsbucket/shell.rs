//! What mongosh users type, as strict Extended JSON: unquoted keys (`{metadata.sensorId: 5}`),
//! single-quoted strings, trailing commas, and the shell's constructors `ISODate("…")`,
//! `new Date("…")`, `ObjectId("…")`, `NumberLong(…)`, `NumberInt(…)` and
//! `NumberDecimal("…")`. Arguments are read as strict JSON first; this is the second try.

/// `text` rewritten as strict JSON, or why it cannot be.
pub fn to_strict(text: &str) -> Result<String, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            '"' | '\'' => {
                let (s, next) = quoted(&chars, i)?;
                push_json_string(&mut out, &s);
                i = next;
            }
            '}' | ']' => {
                // A trailing comma before the close.
                let trimmed = out.trim_end().len();
                if out.get(..trimmed).is_some_and(|o| o.ends_with(',')) {
                    out.truncate(trimmed - 1);
                }
                out.push(c);
                i += 1;
            }
            c if c.is_alphabetic() || c == '_' || c == '$' => {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|&c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.'))
                {
                    i += 1;
                }
                let word: String = chars.get(start..i).unwrap_or_default().iter().collect();
                let after = skip_ws(&chars, i);
                match (word.as_str(), chars.get(after)) {
                    (_, Some(':')) => push_json_string(&mut out, &word),
                    ("true" | "false" | "null", _) => out.push_str(&word),
                    ("new", _) => {} // `new Date(…)` is `Date(…)`.
                    (name, Some('(')) => {
                        let (arg, next) = call_argument(&chars, after)?;
                        out.push_str(&constructor(name, arg)?);
                        i = next;
                    }
                    _ => return Err(format!("'{word}' is neither a key nor a value")),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// The string that starts with the quote at `i`, unescaped, and the index after its end.
fn quoted(chars: &[char], i: usize) -> Result<(String, usize), String> {
    let q = chars.get(i).copied().unwrap_or('"');
    let mut s = String::new();
    let mut j = i + 1;
    loop {
        match chars.get(j) {
            None => return Err("a string has no closing quote".into()),
            Some('\\') => {
                let e = chars.get(j + 1).ok_or("a string ends in a backslash")?;
                match e {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'r' => s.push('\r'),
                    'b' => s.push('\u{8}'),
                    'f' => s.push('\u{c}'),
                    'u' => {
                        let hex: String =
                            chars.get(j + 2..j + 6).unwrap_or_default().iter().collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| format!("bad escape \\u{hex}"))?;
                        s.push(code);
                        j += 4;
                    }
                    other => s.push(*other),
                }
                j += 2;
            }
            Some(&c) if c == q => return Ok((s, j + 1)),
            Some(&c) => {
                s.push(c);
                j += 1;
            }
        }
    }
}

fn push_json_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::Value::String(s.to_string()).to_string());
}

/// The argument of the call whose `(` is at `i`: a string, a number, or nothing; and the
/// index after the `)`.
fn call_argument(chars: &[char], i: usize) -> Result<(Option<String>, usize), String> {
    let j = skip_ws(chars, i + 1);
    let (arg, j) = match chars.get(j) {
        Some(')') => (None, j),
        Some('"' | '\'') => {
            let (s, next) = quoted(chars, j)?;
            (Some(s), skip_ws(chars, next))
        }
        _ => {
            let mut k = j;
            while chars
                .get(k)
                .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
            {
                k += 1;
            }
            let n: String = chars.get(j..k).unwrap_or_default().iter().collect();
            (Some(n), skip_ws(chars, k))
        }
    };
    match chars.get(j) {
        Some(')') => Ok((arg, j + 1)),
        _ => Err("a call takes one string or number, then ')'".into()),
    }
}

/// The Extended JSON of a shell constructor.
fn constructor(name: &str, arg: Option<String>) -> Result<String, String> {
    let s = |v: &str| serde_json::Value::String(v.to_string()).to_string();
    let arg =
        arg.ok_or_else(|| format!("{name}() needs its value: the current time is not taken"))?;
    Ok(match name {
        "ISODate" | "Date" => match arg.parse::<i64>() {
            Ok(ms) => format!(r#"{{"$date":{{"$numberLong":{}}}}}"#, s(&ms.to_string())),
            Err(_) => format!(r#"{{"$date":{}}}"#, s(&utc(&arg))),
        },
        "ObjectId" => format!(r#"{{"$oid":{}}}"#, s(&arg)),
        "NumberLong" => format!(r#"{{"$numberLong":{}}}"#, s(&arg)),
        "NumberInt" => format!(r#"{{"$numberInt":{}}}"#, s(&arg)),
        "NumberDecimal" => format!(r#"{{"$numberDecimal":{}}}"#, s(&arg)),
        other => {
            return Err(format!(
                "{other}(…) is not a constructor this command knows"
            ))
        }
    })
}

/// A shell date's text as RFC 3339: as in mongosh, a date alone is its midnight and a time
/// without a zone is UTC.
fn utc(t: &str) -> String {
    let is_date = |d: &str| {
        d.len() == 10
            && d.char_indices()
                .all(|(i, c)| matches!(i, 4 | 7) == (c == '-'))
    };
    if is_date(t) {
        return format!("{t}T00:00:00Z");
    }
    let time = t.split_once('T').map_or("", |(_, time)| time);
    let zoned = time.ends_with('Z') || time.contains('+') || time.contains('-');
    match time.is_empty() || zoned {
        true => t.to_string(),
        false => format!("{t}Z"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_syntax_becomes_strict_json() {
        for (shell, strict) in [
            ("{metadata.sensorId: 5}", r#"{"metadata.sensorId": 5}"#),
            (
                "{a: 'x \"y\" \\'z', b: [1, 2,], }",
                r#"{"a": "x \"y\" 'z", "b": [1, 2]}"#,
            ),
            (
                "{t: {$gte: ISODate('2021-05-18T00:00:00Z')}}",
                r#"{"t": {"$gte": {"$date":"2021-05-18T00:00:00Z"}}}"#,
            ),
            (
                "{t: new Date(1000)}",
                r#"{"t":  {"$date":{"$numberLong":"1000"}}}"#,
            ),
            (
                "{_id: ObjectId(\"5f1d7a3b9c4e2a1b2c3d4e5f\"), n: NumberLong(7), ok: true}",
                r#"{"_id": {"$oid":"5f1d7a3b9c4e2a1b2c3d4e5f"}, "n": {"$numberLong":"7"}, "ok": true}"#,
            ),
            (r#"{"already": "strict"}"#, r#"{"already": "strict"}"#),
            (
                "{t: ISODate('2021-05-18')}",
                r#"{"t": {"$date":"2021-05-18T00:00:00Z"}}"#,
            ),
            (
                "{t: ISODate('2021-05-18T10:00:00')}",
                r#"{"t": {"$date":"2021-05-18T10:00:00Z"}}"#,
            ),
            (
                "{t: ISODate('2021-05-18T10:00:00+02:00')}",
                r#"{"t": {"$date":"2021-05-18T10:00:00+02:00"}}"#,
            ),
        ] {
            assert_eq!(to_strict(shell).unwrap(), strict, "{shell}");
        }
        for bad in ["{a: ISODate()}", "{a: foo}", "{a: 'x}", "{a: Foo(1)}"] {
            assert!(to_strict(bad).is_err(), "{bad}");
        }
    }
}
