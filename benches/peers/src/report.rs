//! The comparison table: one line per metric, each engine's figure and its ratio to tsbucket's.

/// Which way a metric is better, for the reader.
#[derive(Debug, Clone, Copy)]
pub enum Better {
    /// Rates.
    Higher,
    /// Times and sizes.
    Lower,
}

/// One metric's figures, in engine order (tsbucket first).
#[derive(Debug, Clone)]
pub struct Line {
    /// The metric and its unit.
    pub metric: String,
    /// Which way is better.
    pub better: Better,
    /// One figure per engine; `None` where the engine failed.
    pub values: Vec<Option<f64>>,
}

fn fmt(v: f64) -> String {
    if v >= 100_000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Two significant digits at least, so small ratios do not print as 0.00.
fn ratio(r: f64) -> String {
    if r >= 0.1 {
        format!("{r:.2}")
    } else if r >= 0.01 {
        format!("{r:.3}")
    } else {
        format!("{r:.4}")
    }
}

/// Prints the table as Markdown, so it can be pasted into the README as it is.
pub fn print(engines: &[&str], lines: &[Line]) {
    let mut head = format!("| metric | better | {} |", engines.join(" | "));
    let mut rule = String::from("|---|---|");
    rule.push_str(&"---:|".repeat(engines.len()));
    for e in engines.iter().skip(1) {
        head.push_str(&format!(" {e}/{} |", engines[0]));
        rule.push_str("---:|");
    }
    println!("{head}\n{rule}");
    for l in lines {
        let mut row = format!(
            "| {} | {} |",
            l.metric,
            match l.better {
                Better::Higher => "higher",
                Better::Lower => "lower",
            }
        );
        for v in &l.values {
            row.push_str(&format!(" {} |", v.map_or("failed".into(), fmt)));
        }
        let base = l.values.first().copied().flatten();
        for v in l.values.iter().skip(1) {
            let r = match (base, v) {
                (Some(b), Some(v)) if b > 0.0 => format!("{}x", ratio(v / b)),
                _ => "-".into(),
            };
            row.push_str(&format!(" {r} |"));
        }
        println!("{row}");
    }
}

/// Median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &mut [f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}
