//! Rewrites of a parsed pipeline into an equivalent one that needs less work, as MongoDB's
//! optimiser applies them: whichever way a user writes a question, the operators then see the
//! same form. Each rewrite applied is named in `explain`.
//!
//! - A `$match` that follows a `$sort` moves before it (filtering commutes with a stable sort),
//!   as does one after a `$project` that keeps every path the match reads, or renames the
//!   top-level fields it reads (`{u: "$usage_user"}` then `{u: {$gt: 90}}`: the match moves
//!   with the stored names in it). A `$match` that becomes the first stage joins the filter
//!   pushed down to bucket selection.
//! - A `$project` moves after the `$skip`, `$limit` and `$sort` (on paths it passes through
//!   unchanged, computed fields beside them or not) that follow it: the sort and limit then
//!   reach the scan as a top-k or a stream in time order.
//! - A `$project` that only keeps paths, directly before a `$group` that reads nothing else,
//!   is dropped: the group sees the same values, and the group operator decodes only the
//!   columns it reads anyway.
//! - A `$sort` directly before a `$group` loses the keys the group key fixes: within one group
//!   those keys are equal, so they never order two of its documents. The documented "last
//!   point per series" form, `$sort {meta: 1, time: -1}` then `$group {_id: "$meta", ...
//!   $first}`, becomes a sort on time alone, which the group operator answers from each
//!   series' newest bucket. A sort left with no key is dropped: the stable sort kept the
//!   documents of each group in arrival order, as no sort does. A `$sort` before a `$group`
//!   without `$first` or `$last` is dropped whole: the order of a group's documents changes
//!   nothing but which of equal numbers of different types `$min`/`$max` keep and the last
//!   bits of a sum of doubles, neither of which MongoDB defines either.
//! - `$top`/`$bottom` sharing one `sortBy`, in a `$group` without `$first`/`$last`, become a
//!   `$sort` on that key before the group and `$first`/`$last`: the last point written with
//!   `$top {sortBy: {time: -1}}` is then the sort on time the group operator answers from
//!   each series' newest bucket. Only where that sort comes down to time alone.
//! - The other way round: a `$sort` left on other keys than time alone, directly before a
//!   `$group` with `$first`/`$last` (and no `$top`/`$bottom`, whose ties the sort orders),
//!   goes, and `$first`/`$last` become `$top`/`$bottom` by the sort's keys: the first
//!   document of a stable sort is the top one, ties in arrival order, so the group keeps each
//!   group's first rows by key as it reads them instead of sorting every document.

use crate::query::aggregate::accumulators::AccOp;
use super::expr::Expr;
use super::filter::{Filter, Pred};
use bson::Bson;
use crate::query::aggregate::table::GroupSpec;
use super::pipeline::{Pipeline, Stage};
use super::project::{Computed, Project};

/// Applies every rewrite to `p`; returns one line per rewrite applied, and one starting "not
/// applied:" for each that a user might expect and that could not apply, for `explain`.
pub fn rewrite(p: &mut Pipeline, time_field: &str) -> Vec<String> {
    let mut notes = Vec::new();
    move_matches_earlier(p, &mut notes);
    move_projects_later(p, &mut notes);
    drop_projects_before_groups(p, &mut notes);
    tops_become_sorted_picks(p, time_field, &mut notes);
    drop_sort_keys_fixed_by_group(p, &mut notes);
    sorted_picks_become_tops(p, time_field, &mut notes);
    notes
}

/// The sort keys and output of a `$top`/`$bottom` argument.
fn top_parts(descending: u32, arg: &Expr) -> Option<(Vec<(String, bool)>, &Expr)> {
    let Expr::Array(items) = arg else {
        return None;
    };
    let (out, keys) = items.split_last()?;
    let keys = keys
        .iter()
        .enumerate()
        .map(|(i, k)| match k {
            Expr::Path(p) => Some((p.clone(), i >= 32 || descending & (1 << i) == 0)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((keys, out))
}

/// `$top`/`$bottom` with one `sortBy` in a `$group` without `$first`/`$last`: a `$sort` on
/// that key before the group, then `$first`/`$last` of the output. The first (last) document
/// of a stable sort is what `$top` (`$bottom`) keeps, ties included. A `$sort` already
/// before the group joins the new one as its later keys (a stable sort by B after one by A
/// is a sort by B then A). Only where the sort comes down to the time field once the keys the
/// group key fixes are left out: that sort the group operator answers with picks, any other
/// it would sort documents for, where it takes `$top`/`$bottom` row by row.
fn tops_become_sorted_picks(p: &mut Pipeline, time_field: &str, notes: &mut Vec<String>) {
    for i in 0..p.stages.len() {
        let Some(Stage::Group(g)) = p.stages.get(i) else {
            continue;
        };
        let mut sort_by: Option<Vec<(String, bool)>> = None;
        let mut ok = false;
        for a in &g.accs {
            match a.op {
                AccOp::First | AccOp::Last => {
                    ok = false;
                    break;
                }
                AccOp::Top { descending, .. } => match top_parts(descending, &a.arg) {
                    Some((keys, _)) if sort_by.as_ref().is_none_or(|s| *s == keys) => {
                        sort_by = Some(keys);
                        ok = true;
                    }
                    _ => {
                        ok = false;
                        break;
                    }
                },
                _ => {}
            }
        }
        let (true, Some(mut keys)) = (ok, sort_by) else {
            if g.accs.iter().any(|a| matches!(a.op, AccOp::Top { .. })) {
                notes.push(
                    "not applied: $top/$bottom stay accumulators, as the $group has \
                     $first/$last or $top/$bottom of different sortBy keys"
                        .into(),
                );
            }
            continue;
        };
        let before = match i.checked_sub(1).and_then(|k| p.stages.get(k)) {
            Some(Stage::Sort(before)) => before.as_slice(),
            _ => &[],
        };
        let fixed = fixed_paths(g);
        let mut rest = (keys.iter().chain(before).map(|(k, _)| k.as_str()))
            .filter(|k| !fixed.iter().any(|f| fixes(f, k)))
            .peekable();
        if rest.peek().is_none() || rest.any(|k| k != time_field) {
            notes.push(format!(
                "not applied: $top/$bottom stay accumulators, as their sort is not on '{time_field}' \
                 alone once the keys the $group key fixes are left out"
            ));
            continue;
        }
        let names: Vec<&str> = g.accs.iter().map(|a| a.name.as_str()).collect();
        let mut accs = Vec::with_capacity(g.accs.len());
        // Outputs that are arrays of paths become one pick per path, put back together by a
        // `$project` after the group, so that the group operator reads them as columns.
        let mut assemble: Vec<(String, Expr)> = Vec::new();
        for a in &g.accs {
            let AccOp::Top { descending, bottom } = a.op else {
                accs.push(a.clone());
                assemble.push((a.name.clone(), Expr::Path(a.name.clone())));
                continue;
            };
            let Some((_, out)) = top_parts(descending, &a.arg) else {
                accs.push(a.clone());
                assemble.push((a.name.clone(), Expr::Path(a.name.clone())));
                continue;
            };
            let op = if bottom { AccOp::Last } else { AccOp::First };
            let paths = match out {
                Expr::Array(items) if !items.is_empty() => items
                    .iter()
                    .map(|e| match e {
                        Expr::Path(_) => Some(e.clone()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>(),
                _ => None,
            };
            let part = |k: usize| format!("{}.{k}", a.name).replace('.', "_") + "__top";
            let free = |k: usize| !names.contains(&part(k).as_str());
            match paths {
                Some(paths) if (0..paths.len()).all(free) => {
                    let mut parts = Vec::with_capacity(paths.len());
                    for (k, e) in paths.into_iter().enumerate() {
                        accs.push(crate::query::aggregate::accumulators::AccSpec {
                            name: part(k),
                            op,
                            arg: e,
                        });
                        parts.push(Expr::Path(part(k)));
                    }
                    assemble.push((a.name.clone(), Expr::Array(parts)));
                }
                _ => {
                    accs.push(crate::query::aggregate::accumulators::AccSpec {
                        name: a.name.clone(),
                        op,
                        arg: out.clone(),
                    });
                    assemble.push((a.name.clone(), Expr::Path(a.name.clone())));
                }
            }
        }
        let assemble = match accs.len() != g.accs.len() {
            false => None,
            true => match Project::computed(assemble) {
                Ok(pr) => Some(pr),
                Err(_) => continue,
            },
        };
        let mut g = g.clone();
        g.accs = accs;
        if let Some(pr) = assemble {
            p.stages.insert(i + 1, Stage::Project(pr));
        }
        let mut at = i;
        if let Some(Stage::Sort(before)) = i.checked_sub(1).and_then(|k| p.stages.get(k)) {
            for k in before {
                if !keys.iter().any(|(j, _)| *j == k.0) {
                    keys.push(k.clone());
                }
            }
            at = i - 1;
        }
        notes.push(format!(
            "$top/$bottom became a $sort on {} and $first/$last",
            keys.iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let Some(s) = p.stages.get_mut(i) {
            *s = Stage::Group(g);
        }
        if at == i {
            p.stages.insert(i, Stage::Sort(keys));
        } else if let Some(s) = p.stages.get_mut(at) {
            *s = Stage::Sort(keys);
        }
        // One group per pass: the indices after it moved.
        return tops_become_sorted_picks(p, time_field, notes);
    }
}

/// The keys of a `$sort` at stage `i` directly followed by a `$group`, and the group.
fn sort_then_group(p: &Pipeline, i: usize) -> Option<(&Vec<(String, bool)>, &GroupSpec)> {
    match (p.stages.get(i), p.stages.get(i + 1)) {
        (Some(Stage::Sort(keys)), Some(Stage::Group(g))) => Some((keys, g)),
        _ => None,
    }
}

/// A `$sort` on other keys than `time_field` alone directly before a `$group` with
/// `$first`/`$last` and no `$top`/`$bottom`: the sort goes, and `$first` (`$last`) becomes
/// `$top` (`$bottom`) by its keys (see the module's notes).
fn sorted_picks_become_tops(p: &mut Pipeline, time_field: &str, notes: &mut Vec<String>) {
    let mut i = 0;
    while i + 1 < p.stages.len() {
        let Some((keys, g)) = sort_then_group(p, i) else {
            i += 1;
            continue;
        };
        let on_time = matches!(keys.as_slice(), [(k, _)] if k == time_field);
        let ops = || g.accs.iter().map(|a| a.op);
        let picks = ops().any(|op| matches!(op, AccOp::First | AccOp::Last));
        let tops = ops().any(|op| matches!(op, AccOp::Top { .. }));
        if on_time || !picks || tops || keys.is_empty() || keys.len() > 32 {
            i += 1;
            continue;
        }
        let descending = (keys.iter().enumerate())
            .filter(|(_, (_, asc))| !asc)
            .fold(0u32, |d, (k, _)| d | 1 << k);
        let by: Vec<Expr> = keys.iter().map(|(k, _)| Expr::Path(k.clone())).collect();
        let mut g = g.clone();
        for a in &mut g.accs {
            let bottom = match a.op {
                AccOp::First => false,
                AccOp::Last => true,
                _ => continue,
            };
            let mut items = by.clone();
            items.push(std::mem::replace(&mut a.arg, Expr::Const(bson::Bson::Null)));
            a.op = AccOp::Top { descending, bottom };
            a.arg = Expr::Array(items);
        }
        notes.push(format!(
            "$sort on {} and $first/$last became $top/$bottom by those keys: the $group keeps \
             each group's first rows by key instead of a sort of every document",
            keys.iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        p.stages.remove(i);
        if let Some(s) = p.stages.get_mut(i) {
            *s = Stage::Group(g);
        }
        i += 1;
    }
}

/// Whether a stage reading only `reads` sees the same values after `project` as before it.
fn project_keeps(project: &Project, reads: &[&str]) -> bool {
    if let Some(kept) = project.kept() {
        return reads.iter().all(|r| kept_as_is(&kept, r));
    }
    // An exclusion passes every path that is neither left out nor holds one left out.
    project.dropped().is_some_and(|dropped| {
        reads
            .iter()
            .all(|r| !dropped.iter().any(|d| fixes(d, r) || fixes(r, d)))
    })
}

/// Whether `project`, which computes fields too, passes every path of `reads` through
/// unchanged: each is kept as it is and is neither a computed field nor above or below one.
fn keeps_beside_computed(project: &Project, reads: &[&str]) -> bool {
    project
        .kept_and_computed()
        .is_some_and(|(kept, computed)| reads.iter().all(|r| passes_beside(&kept, computed, r)))
}

/// Whether path `r` passes a projection keeping `kept` and computing `computed` unchanged.
fn passes_beside(kept: &[&str], computed: &[Computed], r: &str) -> bool {
    kept_as_is(kept, r) && !computed.iter().any(|(n, _)| fixes(n, r) || fixes(r, n))
}

/// Moves each `$project` after the `$skip`, `$limit` and `$sort` stages that follow it, as
/// MongoDB's optimiser does: a projection changes neither how many documents there are nor
/// their order, and a sort on paths it passes through unchanged orders them alike. The sort
/// and limit then reach the scan, which keeps only the first rows (a top-k) instead of
/// projecting every measurement first.
fn move_projects_later(p: &mut Pipeline, notes: &mut Vec<String>) {
    let mut moved = false;
    let mut i = 1;
    while i < p.stages.len() {
        let swap = match (p.stages.get(i - 1), p.stages.get(i)) {
            (Some(Stage::Project(_)), Some(Stage::Skip(_) | Stage::Limit(_))) => true,
            (Some(Stage::Project(pr)), Some(Stage::Sort(keys))) => {
                let reads: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
                project_keeps(pr, &reads) || keeps_beside_computed(pr, &reads)
            }
            _ => false,
        };
        if swap {
            p.stages.swap(i - 1, i);
            moved = true;
            i = i.saturating_sub(1).max(1);
        } else {
            i += 1;
        }
    }
    if moved {
        notes.push("$project moved after the $sort, $skip or $limit that followed it".into());
    }
}

/// Whether a projection keeping `kept` passes path `read` through unchanged: a path with a
/// numeric component might name an array element, which a kept path does not follow.
fn kept_as_is(kept: &[&str], read: &str) -> bool {
    let plain = |p: &str| !p.split('.').any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
    plain(read) && kept.iter().any(|k| plain(k) && fixes(k, read))
}

/// The filter `f` reads before `project` to match what it matches after it, when `project`
/// passes every path `f` reads through unchanged or under a new top-level name
/// (`{u: "$usage_user"}`, read as `u`): the paths then read the same values. `None` when some
/// path is neither (computed otherwise, or a rename read below its top level, where arrays
/// would make the two differ).
fn match_through(project: &Project, f: &Filter) -> Option<Filter> {
    let (kept, computed) = project.kept_and_computed()?;
    let mut paths = Vec::new();
    f.paths(&mut paths);
    let source = |path: &str| {
        computed.iter().find_map(|(name, e)| match e {
            Expr::Path(src) if name == path && !src.contains('.') => Some(src.clone()),
            _ => None,
        })
    };
    let ok = paths
        .iter()
        .all(|p| source(p).is_some() || passes_beside(&kept, computed, p));
    ok.then(|| f.renamed(&|p: &str| source(p).unwrap_or_else(|| p.to_string())))
}

/// A filter before `project` that every document matching `f` after it matches too, made of
/// the conjuncts of `f` that read paths `project` passes unchanged (taken as they are) or a
/// field it sets to a dotted path (`{h: "$tags.hostname"}`) with a comparison to a plain
/// value (read at that path: any value the field holds, or an array element of it, is at the
/// path too). `None` when no conjunct qualifies. The match stays after the project too, and
/// decides; this one lets the scan prune buckets first.
fn looser_before(project: &Project, f: &Filter) -> Option<Filter> {
    let (kept, computed) = project.kept_and_computed()?;
    let mut taken = Vec::new();
    for c in f.conjuncts() {
        let mut paths = Vec::new();
        c.paths(&mut paths);
        if paths.iter().all(|p| passes_beside(&kept, computed, p)) {
            taken.push(c.clone());
            continue;
        }
        let Filter::Field { path, pred } = c else {
            continue;
        };
        let source = computed.iter().find_map(|(name, e)| match e {
            Expr::Path(src) if name == path => Some(src),
            _ => None,
        });
        if let Some(src) = source.filter(|_| implied_at_source(pred)) {
            taken.push(Filter::Field {
                path: src.clone(),
                pred: pred.clone(),
            });
        }
    }
    match taken.len() {
        0 => None,
        1 => taken.pop(),
        _ => Some(Filter::And(taken)),
    }
}

/// True when a value set from a path that satisfies `pred` leaves the document satisfying
/// `pred` at that path: comparisons and `$in` of plain values (not null, arrays, regular
/// expressions or the key bounds), which hold for a value or an element of an array either way.
/// Negations and `$exists` do not: a path through arrays of documents lacking the field gives
/// an empty array as the value.
fn implied_at_source(pred: &Pred) -> bool {
    let plain = |v: &Bson| {
        !matches!(
            v,
            Bson::Null
                | Bson::Undefined
                | Bson::Array(_)
                | Bson::RegularExpression(_)
                | Bson::MinKey
                | Bson::MaxKey
        )
    };
    match pred {
        Pred::Eq(v) | Pred::Gt(v) | Pred::Gte(v) | Pred::Lt(v) | Pred::Lte(v) => plain(v),
        Pred::In(vs) => vs.iter().all(plain),
        Pred::All(ps) => ps.iter().all(implied_at_source),
        _ => false,
    }
}

fn move_matches_earlier(p: &mut Pipeline, notes: &mut Vec<String>) {
    let mut moved = Vec::new();
    let mut renamed = false;
    let mut looser: Vec<Filter> = Vec::new();
    let mut i = 1;
    while i < p.stages.len() {
        // A match after a project that renames the fields it reads moves with the stored
        // names in them.
        let (over, through) = match (p.stages.get(i - 1), p.stages.get(i)) {
            (Some(Stage::Sort(_)), Some(Stage::Match(_))) => (Some("$sort"), None),
            (Some(Stage::Project(pr)), Some(Stage::Match(f))) => {
                let mut paths = Vec::new();
                f.paths(&mut paths);
                let reads: Vec<&str> = paths.iter().map(String::as_str).collect();
                match project_keeps(pr, &reads) {
                    true => (Some("$project"), None),
                    false => match match_through(pr, f) {
                        Some(t) => (Some("$project"), Some(t)),
                        None => (None, None),
                    },
                }
            }
            _ => (None, None),
        };
        if let (Some(t), Some(slot)) = (through, p.stages.get_mut(i)) {
            *slot = Stage::Match(t);
            renamed = true;
        }
        if over.is_none() {
            if let (Some(Stage::Project(pr)), Some(Stage::Match(f))) =
                (p.stages.get(i - 1), p.stages.get(i))
            {
                // A looser match goes before the project, once, and may move on from there.
                if let Some(pre) = looser_before(pr, f).filter(|l| !looser.contains(l)) {
                    looser.push(pre.clone());
                    p.stages.insert(i - 1, Stage::Match(pre));
                    i = i.saturating_sub(1).max(1);
                    continue;
                }
                let note = "not applied: a $match stays after a $project that does not keep \
                            every path it reads";
                if !notes.iter().any(|n| n == note) {
                    notes.push(note.into());
                }
            }
        }
        if let Some(over) = over {
            p.stages.swap(i - 1, i);
            if !moved.contains(&over) {
                moved.push(over);
            }
            // The match may now follow another sort.
            i = i.saturating_sub(1).max(1);
        } else {
            i += 1;
        }
    }
    if renamed {
        notes.push("$match reads the fields a $project renames under their stored names".into());
    }
    if !looser.is_empty() {
        notes.push(
            "a looser $match on the stored paths goes before a $project that sets fields \
             from dotted paths; the $match after it still decides"
                .into(),
        );
    }
    for over in moved {
        notes.push(format!("$match moved before {over}"));
    }
    let mut pushed = false;
    while let Some(Stage::Match(_)) = p.stages.first() {
        if let Stage::Match(f) = p.stages.remove(0) {
            let prev = std::mem::replace(&mut p.filter, Filter::True);
            p.filter = match prev {
                Filter::True => f,
                Filter::And(mut all) => {
                    all.push(f);
                    Filter::And(all)
                }
                other => Filter::And(vec![other, f]),
            };
            pushed = true;
        }
    }
    if pushed {
        notes.push("$match pushed down to bucket selection".into());
    }
}

/// `e` with each path that names one of `computed` replaced by its expression.
fn substitute(e: &Expr, computed: &[(String, Expr)]) -> Expr {
    let sub = |x: &Expr| substitute(x, computed);
    match e {
        Expr::Path(p) => match computed.iter().find(|(n, _)| n == p) {
            Some((_, x)) => x.clone(),
            None => e.clone(),
        },
        Expr::Doc(fields) => Expr::Doc(fields.iter().map(|(k, x)| (k.clone(), sub(x))).collect()),
        Expr::Array(items) => Expr::Array(items.iter().map(sub).collect()),
        Expr::DateTrunc(t) => {
            let mut t = (**t).clone();
            t.date = sub(&t.date);
            Expr::DateTrunc(Box::new(t))
        }
        Expr::Const(_) => e.clone(),
    }
}

/// The `$group` `g` reading through the `$project` `pr` before it: its computed fields
/// replaced by their expressions. `None` unless every path the group reads is a computed
/// field itself (a path below one could cross arrays differently) or kept as it is.
fn group_through(pr: &Project, g: &GroupSpec) -> Option<GroupSpec> {
    let (kept, computed) = pr.kept_and_computed()?;
    let mut reads = Vec::new();
    g.id.paths(&mut reads);
    for a in &g.accs {
        a.arg.paths(&mut reads);
    }
    let ok = reads.iter().all(|r| {
        computed.iter().any(|(n, _)| n == r)
            || (kept_as_is(&kept, r) && !computed.iter().any(|(n, _)| fixes(n, r)))
    });
    if !ok {
        return None;
    }
    let mut g = g.clone();
    g.id = substitute(&g.id, computed);
    for a in &mut g.accs {
        a.arg = substitute(&a.arg, computed);
    }
    Some(g)
}

fn drop_projects_before_groups(p: &mut Pipeline, notes: &mut Vec<String>) {
    let mut i = 0;
    while i + 1 < p.stages.len() {
        let through = match (p.stages.get(i), p.stages.get(i + 1)) {
            (Some(Stage::Project(pr)), Some(Stage::Group(g))) => group_through(pr, g),
            _ => None,
        };
        if let Some(g) = through {
            let computes = matches!(p.stages.get(i), Some(Stage::Project(pr))
                if pr.kept_and_computed().is_some_and(|(_, c)| !c.is_empty()));
            p.stages.remove(i);
            if let Some(s) = p.stages.get_mut(i) {
                *s = Stage::Group(g);
            }
            notes.push(match computes {
                true => "$project before $group folded into it: the group reads the computed \
                         fields' paths and constants directly"
                    .into(),
                false => "$project before $group dropped: the group reads only what it keeps"
                    .into(),
            });
        } else {
            if let (Some(Stage::Project(_)), Some(Stage::Group(_))) =
                (p.stages.get(i), p.stages.get(i + 1))
            {
                notes.push(
                    "not applied: a $project before a $group stays, as it leaves out a field \
                     the group reads, or the group reads below a computed field"
                        .into(),
                );
            }
            i += 1;
        }
    }
}

fn drop_sort_keys_fixed_by_group(p: &mut Pipeline, notes: &mut Vec<String>) {
    let mut i = 0;
    while i + 1 < p.stages.len() {
        let Some((keys, g)) = sort_then_group(p, i) else {
            i += 1;
            continue;
        };
        // Only `$first` and `$last` depend on the order of a group's documents; without them
        // the sort orders nothing the group keeps.
        let picks = g
            .accs
            .iter()
            .any(|a| matches!(a.op, AccOp::First | AccOp::Last | AccOp::Top { .. }));
        let fixed = fixed_paths(g);
        let kept: Vec<(String, bool)> = keys
            .iter()
            .filter(|(k, _)| picks && !fixed.iter().any(|f| fixes(f, k)))
            .cloned()
            .collect();
        if kept.len() == keys.len() {
            i += 1;
            continue;
        }
        let dropped: Vec<&str> = keys
            .iter()
            .filter(|(k, _)| !kept.iter().any(|(j, _)| j == k))
            .map(|(k, _)| k.as_str())
            .collect();
        notes.push(if !picks {
            format!(
                "$sort on {} dropped: the $group after it has no $first or $last",
                dropped.join(", ")
            )
        } else if kept.is_empty() {
            format!(
                "$sort on {} dropped: the $group key fixes it",
                dropped.join(", ")
            )
        } else {
            format!(
                "$sort keys {} dropped: the $group key fixes them; sorting on {}",
                dropped.join(", "),
                kept.iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        if kept.is_empty() {
            p.stages.remove(i);
        } else if let Some(s) = p.stages.get_mut(i) {
            *s = Stage::Sort(kept);
            i += 1;
        }
    }
}

/// The field paths whose values the group key determines: those it takes as they are.
fn fixed_paths(g: &GroupSpec) -> Vec<&str> {
    let mut out = Vec::new();
    match &g.id {
        Expr::Path(p) => out.push(p.as_str()),
        Expr::Doc(fields) => {
            for (_, e) in fields {
                if let Expr::Path(p) = e {
                    out.push(p.as_str());
                }
            }
        }
        _ => {}
    }
    // A numeric component means an array index to a sort but a field name to an expression.
    out.retain(|p| {
        !p.split('.')
            .any(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
    });
    out
}

/// Whether the value at `key` is a function of the value at `path`: the same path, or one below
/// it.
fn fixes(path: &str, key: &str) -> bool {
    key == path
        || key
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Document};

    /// `stages` rewritten for a collection whose time field is `t`.
    fn rewritten(stages: &[Document]) -> (Pipeline, Vec<String>) {
        rewritten_on(stages, "t")
    }

    fn rewritten_on(stages: &[Document], time_field: &str) -> (Pipeline, Vec<String>) {
        let mut p = Pipeline::parse(stages).unwrap();
        let notes = rewrite(&mut p, time_field);
        (p, notes)
    }

    fn sort_of(p: &Pipeline) -> Option<Vec<(String, bool)>> {
        p.stages.iter().find_map(|s| match s {
            Stage::Sort(k) => Some(k.clone()),
            _ => None,
        })
    }

    #[test]
    fn tops_become_a_sort_and_picks() {
        let top = |by: Document, op: &str| doc! {op: {"sortBy": by, "output": "$u"}};
        // Alone: a sort on the key, `$first` for `$top`, `$last` for `$bottom`.
        let (p, notes) = rewritten(&[doc! {"$group": {
            "_id": "$h", "a": top(doc! {"t": -1}, "$top"), "b": top(doc! {"t": -1}, "$bottom"),
            "n": {"$sum": 1},
        }}]);
        assert_eq!(sort_of(&p), Some(vec![("t".to_string(), false)]));
        let Some(Stage::Group(g)) = p.stages.get(1) else {
            panic!("{:?}", p.stages);
        };
        let ops: Vec<AccOp> = g.accs.iter().map(|a| a.op).collect();
        assert_eq!(ops, [AccOp::First, AccOp::Last, AccOp::Sum]);
        assert_eq!(g.accs[0].arg, Expr::Path("u".into()));
        assert!(notes[0].contains("$top/$bottom"), "{notes:?}");

        // After a sort: one sort, the new key first, then the old ones it does not repeat;
        // the key the group fixes is dropped after that.
        let (p, _) = rewritten(&[
            doc! {"$sort": {"h": 1, "t": -1}},
            doc! {"$group": {"_id": "$h", "a": top(doc! {"t": 1}, "$top")}},
        ]);
        assert_eq!(p.stages.len(), 2);
        assert_eq!(sort_of(&p), Some(vec![("t".to_string(), true)]));
        // A sort that would keep another key than time, and a sortBy on another field: the
        // group operator takes `$top` row by row where it would sort documents.
        for (sort, by) in [
            (doc! {"h": 1, "t": -1, "x": 1}, doc! {"t": 1}),
            (doc! {}, doc! {"x": 1}),
            (doc! {}, doc! {"t": 1, "x": -1}),
        ] {
            let mut stages = vec![doc! {"$group": {"_id": "$h", "a": top(by, "$top")}}];
            if !sort.is_empty() {
                stages.insert(0, doc! {"$sort": sort});
            }
            let (p, notes) = rewritten(&stages);
            assert_eq!(p.stages.len(), stages.len());
            assert!(
                notes.iter().any(|n| n.starts_with("not applied: $top")),
                "{notes:?}"
            );
        }

        // An output of several paths: one pick each, put back together after the group.
        let (p, _) = rewritten(&[doc! {"$group": {
            "_id": "$h",
            "a": {"$top": {"sortBy": {"t": -1}, "output": ["$t", "$u"]}},
            "n": {"$sum": 1},
        }}]);
        let names: Vec<&str> = match p.stages.get(1) {
            Some(Stage::Group(g)) => g.accs.iter().map(|a| a.name.as_str()).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(names, ["a_0__top", "a_1__top", "n"]);
        assert!(matches!(p.stages.get(2), Some(Stage::Project(_))));
        let d = doc! {"_id": 1, "a_0__top": 5, "a_1__top": "x", "n": 2};
        let Some(Stage::Project(pr)) = p.stages.get(2) else {
            unreachable!()
        };
        assert_eq!(pr.apply(d).unwrap(), doc! {"_id": 1, "a": [5, "x"], "n": 2});

        // Different sortBy, or `$first` beside: left as written.
        for g in [
            doc! {"_id": "$h", "a": top(doc! {"t": 1}, "$top"), "b": top(doc! {"t": -1}, "$top")},
            doc! {"_id": "$h", "a": top(doc! {"t": 1}, "$top"), "f": {"$first": "$u"}},
        ] {
            let (p, notes) = rewritten(&[doc! {"$group": g}]);
            assert_eq!(p.stages.len(), 1);
            assert!(
                notes.len() == 1 && notes.iter().all(|n| n.starts_with("not applied: $top")),
                "{notes:?}"
            );
        }
    }

    #[test]
    fn sort_keys_the_group_key_fixes_are_dropped() {
        let rewritten = |stages: &[Document]| rewritten_on(stages, "time");
        let (p, notes) = rewritten(&[
            doc! {"$sort": {"tags.hostname": 1, "time": -1}},
            doc! {"$group": {"_id": "$tags.hostname", "u": {"$first": "$usage_user"}}},
        ]);
        assert_eq!(sort_of(&p), Some(vec![("time".to_string(), false)]));
        assert_eq!(notes.len(), 1, "{notes:?}");

        // A key below a grouped path is fixed too; one above it is not.
        let (p, _) = rewritten(&[
            doc! {"$sort": {"tags.hostname": 1, "time": 1}},
            doc! {"$group": {"_id": {"t": "$tags"}, "u": {"$last": "$u"}}},
        ]);
        assert_eq!(sort_of(&p), Some(vec![("time".to_string(), true)]));
        // Keys left beside time: `$last` becomes `$bottom` by them, and the sort goes.
        let (p, notes) = rewritten(&[
            doc! {"$sort": {"tags": 1, "time": -1}},
            doc! {"$group": {"_id": "$tags.hostname", "u": {"$last": "$u"}, "n": {"$sum": 1}}},
        ]);
        assert_eq!(sort_of(&p), None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("$sort on tags, time and $first/$last became"));
        let Some(Stage::Group(g)) = p.stages.first() else {
            panic!("{:?}", p.stages.len())
        };
        assert_eq!(g.accs[0].op, AccOp::Top { descending: 0b10, bottom: true });
        assert_eq!(
            g.accs[0].arg,
            Expr::Array(vec![
                Expr::Path("tags".into()),
                Expr::Path("time".into()),
                Expr::Path("u".into())
            ])
        );
        assert_eq!(g.accs[1].op, AccOp::Sum);
    }

    #[test]
    fn a_sort_the_group_key_fixes_entirely_is_dropped() {
        let (p, _) = rewritten(&[
            doc! {"$sort": {"h": 1}},
            doc! {"$group": {"_id": "$h", "u": {"$first": "$u"}}},
        ]);
        assert_eq!(sort_of(&p), None);
        assert_eq!(p.stages.len(), 1);
    }

    #[test]
    fn a_sort_before_a_group_without_picks_is_dropped() {
        let (p, notes) = rewritten(&[
            doc! {"$sort": {"time": 1}},
            doc! {"$group": {"_id": "$h", "m": {"$max": "$u"}, "s": {"$sum": "$u"}}},
        ]);
        assert!(matches!(p.stages.as_slice(), [Stage::Group(_)]), "{notes:?}");
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn numeric_path_components_are_not_taken_as_fixed() {
        let (p, notes) = rewritten(&[
            doc! {"$sort": {"a.0": 1, "t": 1}},
            doc! {"$group": {"_id": "$a.0", "u": {"$first": "$u"}}},
        ]);
        assert_eq!(sort_of(&p), None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("$sort on a.0, t and"), "{notes:?}");
    }

    #[test]
    fn projects_that_keep_what_follows_reads_give_way() {
        let (p, notes) = rewritten(&[
            doc! {"$project": {"time": 1, "tags.hostname": 1, "u": 1}},
            doc! {"$match": {"u": {"$gt": 90}}},
            doc! {"$group": {"_id": "$tags.hostname", "m": {"$max": "$u"}}},
        ]);
        assert_eq!(p.filter.conjuncts().len(), 1);
        assert!(matches!(p.stages.as_slice(), [Stage::Group(_)]), "{notes:?}");
        assert_eq!(notes.len(), 3, "{notes:?}");

        // Not when the next stage reads a path the projection drops or renames.
        for stages in [
            vec![
                doc! {"$project": {"time": 1, "u": 1}},
                doc! {"$match": {"v": 1}},
            ],
            vec![
                doc! {"$project": {"tags.hostname": 1}},
                doc! {"$group": {"_id": "$tags", "n": {"$count": {}}}},
            ],
            vec![
                doc! {"$project": {"h": "$tags"}},
                doc! {"$group": {"_id": "$h.hostname", "n": {"$count": {}}}},
            ],
            vec![
                doc! {"$project": {"h": "$tags.hostname"}},
                doc! {"$group": {"_id": "$h", "m": {"$max": "$u"}}},
            ],
            vec![
                doc! {"$project": {"_id": 0, "u": 1}},
                doc! {"$group": {"_id": "$_id", "n": {"$count": {}}}},
            ],
            vec![doc! {"$project": {"a": 0}}, doc! {"$match": {"a.c": 1}}],
            vec![doc! {"$project": {"a.c": 0}}, doc! {"$match": {"a": {"c": 1}}}],
        ] {
            let (p, notes) = rewritten(&stages);
            assert_eq!(p.stages.len(), 2, "{stages:?}");
            assert!(
                notes.len() == 1 && notes.iter().all(|n| n.starts_with("not applied: a $")),
                "{notes:?}"
            );
        }
    }

    #[test]
    fn exclusions_let_matches_through_and_projects_follow_sorts_and_limits() {
        // An exclusion passes every path it does not leave out.
        let (p, notes) = rewritten(&[doc! {"$project": {"a": 0, "_id": 0}}, doc! {"$match": {"b": 1}}]);
        assert!(matches!(p.stages.as_slice(), [Stage::Project(_)]), "{notes:?}");
        assert_eq!(p.filter.conjuncts().len(), 1);
        // A projection moves after a sort on paths it passes and the limit after it, so that
        // the sort and limit reach the scan; not past a sort on a path it changes.
        let (p, notes) = rewritten(&[
            doc! {"$project": {"_id": 0, "u": 1, "t": 1}},
            doc! {"$sort": {"u": -1}},
            doc! {"$limit": 3},
        ]);
        assert!(
            matches!(p.stages.as_slice(), [Stage::Sort(_), Stage::Limit(3), Stage::Project(_)]),
            "{:?}",
            p.stages
        );
        assert!(notes.iter().any(|n| n.starts_with("$project moved after")), "{notes:?}");
        // Computed fields beside a kept sort path move too; a sort on a computed one stays.
        let (p, _) = rewritten(&[
            doc! {"$project": {"t": 1, "u": "$v"}},
            doc! {"$sort": {"t": -1}},
            doc! {"$limit": 3},
        ]);
        assert!(
            matches!(p.stages.as_slice(), [Stage::Sort(_), Stage::Limit(3), Stage::Project(_)]),
            "{:?}",
            p.stages
        );
        let (p, _) = rewritten(&[
            doc! {"$project": {"u": "$v"}},
            doc! {"$sort": {"u": -1}},
            doc! {"$limit": 3},
        ]);
        assert!(
            matches!(p.stages.as_slice(), [Stage::Project(_), Stage::Sort(_), Stage::Limit(3)]),
            "{:?}",
            p.stages
        );
    }

    #[test]
    fn computed_fields_fold_into_the_group_after_them() {
        let (p, notes) = rewritten(&[
            doc! {"$project": {"h": "$tags.hostname", "u": 1, "c": "x", "l": {"$literal": "$y"}}},
            doc! {"$group": {"_id": {"h": "$h", "c": "$c"}, "m": {"$max": "$u"}, "f": {"$min": "$l"}}},
        ]);
        let [Stage::Group(g)] = p.stages.as_slice() else {
            panic!("{notes:?}")
        };
        assert_eq!(
            g.id,
            Expr::Doc(vec![
                ("h".into(), Expr::Path("tags.hostname".into())),
                ("c".into(), Expr::Const("x".into())),
            ])
        );
        assert_eq!(g.accs[0].arg, Expr::Path("u".into()));
        assert_eq!(g.accs[1].arg, Expr::Const("$y".into()));
        assert!(notes[0].starts_with("$project before $group folded"), "{notes:?}");
    }

    #[test]
    fn matches_move_before_sorts_and_down_to_selection() {
        let (p, notes) = rewritten(&[
            doc! {"$match": {"a": 1}},
            doc! {"$sort": {"t": 1}},
            doc! {"$match": {"b": 2}},
            doc! {"$limit": 3},
            doc! {"$match": {"c": 3}},
        ]);
        assert_eq!(p.filter.conjuncts().len(), 2);
        assert!(matches!(
            p.stages.as_slice(),
            [Stage::Sort(_), Stage::Limit(3), Stage::Match(_)]
        ));
        assert_eq!(notes.len(), 2, "{notes:?}");
    }
}
