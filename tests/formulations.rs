//! Every question of the formulation matrix gives the same answer in each of its forms, on
//! data split between flushed segments, buckets rebuilt from the log after a reopen, and
//! buckets written after it; and each form's answer is also what the document path (the
//! pipeline as written, no rewrites) gives.

mod common;
use common::load_split;
use tsbucket::bson::{doc, Document};
use tsbucket::{Collection, TimeseriesOptions};
use tsbucket_workload::formulations::{canonical, devops_matrix, seed004_matrix, Form, Question};
use tsbucket_workload::{Devops, Seed004};

fn check(c: &Collection, questions: &[Question]) {
    for q in questions {
        let mut first: Option<(&str, Vec<String>)> = None;
        for (name, form) in &q.forms {
            let got = canonical(&form.run(c).unwrap().into_documents().unwrap(), q.ordered);
            if let Form::Aggregate(p) = form {
                let reference: Vec<Document> = c
                    .aggregate_unpacked(p.clone())
                    .unwrap()
                    .collect::<tsbucket::Result<_>>()
                    .unwrap();
                assert_eq!(
                    got,
                    canonical(&reference, q.ordered),
                    "{} {name}: not what the document path gives",
                    q.name
                );
            }
            match &first {
                None => first = Some((name, got)),
                Some((f, want)) => assert_eq!(&got, want, "{} {name} against {f}", q.name),
            }
        }
        // High CPU on one host may find nothing on small data; everything else answers.
        if q.name != "high-cpu-1" {
            assert!(
                first.is_some_and(|(_, a)| !a.is_empty()),
                "{}: no answer",
                q.name
            );
        }
    }
}

#[test]
fn devops_forms_agree() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Devops {
        hosts: 40,
        hours: 3.0,
        ..Devops::default()
    };
    let docs: Vec<Document> = cfg.generate().collect();
    let (db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("time").meta_field("tags"),
        &docs,
    );
    let questions = devops_matrix(&cfg);
    assert_eq!(questions.len(), 19);
    check(&c, &questions);

    // A top by fields, the time or meta paths reads the buckets best first by their bounds and
    // stops early; the document path sorts every measurement. Same documents, ties in the
    // same order.
    for (sort, limit) in [
        (doc! {"usage_user": -1}, 10),
        (doc! {"usage_idle": 1}, 25),
        (doc! {"usage_guest": -1, "time": 1}, 7),
        (doc! {"time": -1, "usage_user": -1}, 5),
        (doc! {"tags.hostname": 1, "time": -1}, 3),
        (doc! {"tags.region": -1, "usage_idle": 1, "time": 1}, 12),
    ] {
        let p = vec![doc! {"$sort": sort.clone()}, doc! {"$limit": limit}];
        let fast: Vec<Document> = c
            .aggregate(p.clone())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let all: Vec<Document> = c
            .aggregate_unpacked(p)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(fast.len(), limit as usize);
        assert_eq!(fast, all, "{sort}");
    }

    // The documented last-point form says how it was rewritten, and reads only each series'
    // newest buckets, as the sort on time does.
    let lastpoint = questions.iter().find(|q| q.name == "lastpoint").unwrap();
    let form = |name: &str| match &lastpoint.forms.iter().find(|(n, _)| *n == name).unwrap().1 {
        Form::Aggregate(p) => p.clone(),
        Form::AggregateBson(p) => p.clone(),
        Form::Find(..) | Form::FindBson(..) => unreachable!(),
    };
    let documented = c
        .explain_aggregate(form("sort-host-asc-time-desc-first"))
        .unwrap();
    let ours = c.explain_aggregate(form("sort-time-asc-last")).unwrap();
    assert!(
        documented
            .rewrites
            .iter()
            .any(|r| r.contains("tags.hostname")),
        "{documented:?}"
    );
    assert!(ours.rewrites.is_empty(), "{ours:?}");
    // The operators say how each ran: the columnar group keeps picks by time in both.
    for ex in [&documented, &ours] {
        assert!(
            ex.operators
                .first()
                .is_some_and(|o| o.contains("$first/$last kept by time")),
            "{ex:?}"
        );
    }
    // How other pipelines ran, as explain says: (pipeline, part of a rewrite line or "", part
    // of an operator line). A group whose output is sorted on `_id` is ordered from its keys;
    // `$top`/`$bottom` by other keys than time run on columns, row by row, and a rewrite that
    // cannot apply says so; a `$first` after a `$sort` on other keys than time becomes `$top`
    // by them, and buckets that cannot beat its kept rows are passed over; a `$project` of
    // computed fields folds into the `$group` after it, and one whose fields the group reads
    // below stays, the group running over documents.
    let columns = "$group: hash aggregate on typed columns, expressions";
    for (stages, rewrite, operator) in [
        (
            vec![
                doc! {"$group": {"_id": {"h": "$tags.hostname"}, "n": {"$sum": 1}}},
                doc! {"$sort": {"_id.h": -1}},
            ],
            "",
            "groups ordered by their _id keys",
        ),
        (
            vec![
                doc! {"$group": {"_id": "$tags.hostname", "n": {"$sum": {"$literal": 1}},
                "a": {"$top": {"sortBy": {"time": -1}, "output": "$usage_user"}},
                "b": {"$top": {"sortBy": {"usage_user": -1}, "output": "$time"}}}},
            ],
            "not applied: $top/$bottom",
            columns,
        ),
        (
            vec![
                doc! {"$sort": {"usage_user": -1}},
                doc! {"$group": {"_id": "$tags.hostname", "u": {"$first": "$usage_user"}}},
            ],
            "$sort on usage_user and $first/$last became $top",
            "for $top/$bottom, skipped by the bounds of their first sort key",
        ),
        (
            vec![
                doc! {"$project": {"h": "$tags.hostname", "u": "$usage_user"}},
                doc! {"$group": {"_id": "$h", "u": {"$max": "$u"}}},
            ],
            "$project before $group folded",
            "$group: hash aggregate on typed columns",
        ),
        (
            vec![
                doc! {"$project": {"h": "$tags", "u": "$usage_user"}},
                doc! {"$group": {"_id": "$h.hostname", "u": {"$max": "$u"}}},
            ],
            "not applied: a $project",
            "$group: hash aggregate over documents (not on columns:",
        ),
    ] {
        let ex = c.explain_aggregate(stages).unwrap();
        let says = |lines: &[String], part: &str| lines.iter().any(|l| l.contains(part));
        assert!(rewrite.is_empty() || says(&ex.rewrites, rewrite), "{ex:?}");
        assert!(says(&ex.operators, operator), "{ex:?}");
    }
    assert_eq!(documented.buckets_examined, ours.buckets_examined);
    assert!(
        documented.buckets_examined < documented.buckets_total,
        "{documented:?}"
    );
    // `$top`/`$bottom` by time become the same sort and picks, and read as few buckets.
    for name in ["top-time-desc", "bottom-time-asc"] {
        let ex = c.explain_aggregate(form(name)).unwrap();
        assert!(
            ex.rewrites.iter().any(|r| r.contains("$top/$bottom")),
            "{name}: {ex:?}"
        );
        assert_eq!(ex.buckets_examined, ours.buckets_examined, "{name}");
    }
    // So does an output of several fields as one array, and it equals the fields' picks.
    let array = vec![doc! {"$group": {
        "_id": "$tags.hostname",
        "last": {"$top": {"sortBy": {"time": -1}, "output": ["$time", "$usage_user"]}},
    }}];
    let ex = c.explain_aggregate(array.clone()).unwrap();
    assert_eq!(ex.buckets_examined, ours.buckets_examined, "{ex:?}");
    let got: Vec<Document> = c
        .aggregate(array.clone())
        .unwrap()
        .collect::<tsbucket::Result<_>>()
        .unwrap();
    let want: Vec<Document> = c
        .aggregate_unpacked(array)
        .unwrap()
        .collect::<tsbucket::Result<_>>()
        .unwrap();
    assert_eq!(canonical(&got, false), canonical(&want, false));
    assert_eq!(got.len(), cfg.hosts);
    db.close().unwrap();
}

#[test]
fn seed004_forms_agree() {
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<Document> = Seed004 {
        scale: 0.003,
        seed: 4,
    }
    .generate()
    .collect();
    let (db, c) = load_split(
        dir.path(),
        TimeseriesOptions::new("timestamp").meta_field("dims"),
        &docs,
    );
    check(&c, &seed004_matrix());
    db.close().unwrap();
}
