//! Hash aggregation for `$group`: group key -> accumulator states.
//!
//! Keys are compared as MongoDB compares values (numbers by value, so `1`, `1.0` and
//! `NumberLong(1)` are one group; documents field by field in order), which a canonical byte
//! encoding of the key gives: the map hashes those bytes, and the group keeps the `_id` value
//! first seen. Groups come out in order of first appearance.

use crate::query::aggregate::accumulators::{Acc, AccOp, AccSpec};
use crate::query::expr::{Expr, Row};
use crate::query::keyset::KeySet;
use crate::query::sort::{norm, sort_value, KeyOrder};
use crate::error::{Error, Result};
use crate::order::{as_f64, type_rank};
use bson::{Bson, Document};

/// A `$group` stage.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// The `_id` expression.
    pub id: Expr,
    /// The output fields.
    pub accs: Vec<AccSpec>,
}

/// Builds a group's `_id` from a key cache's template: the table the template belongs to
/// (0 for the table's own, else the number given to [`GroupTable::merge`]), the template's
/// part and the bin starts of the key's time leaves (see
/// [`crate::query::aggregate::key_cache::KeyCache::id_value`]); `None` when it cannot.
pub type Realize<'a> = &'a dyn Fn(u16, u32, &[i64]) -> Option<Bson>;

/// [`Realize`], owned, for output built as it is read ([`GroupDocs`]).
pub type OwnedRealize = Box<dyn Fn(u16, u32, &[i64]) -> Option<Bson> + Send + Sync>;

/// A group's `_id`: built, or the template (its table, its part) and bin starts (up to two) to
/// build it from when it is output, so that the tables of a parallel group build no `_id`
/// that a merge drops, and hold 24 bytes per group instead of a `Bson`'s 112 meanwhile.
#[derive(Debug, Clone, Copy)]
enum GroupId {
    /// Index in `GroupTable::built`.
    Built(u32),
    Template {
        origin: u16,
        n: u8,
        part: u32,
        starts: [i64; 2],
    },
}

/// Groups by canonical key. Keys live in one byte arena and states in one flat vector
/// (`accs[g * width..]`), so that many groups cost few allocations to build and drop.
pub struct GroupTable {
    /// The groups' keys, numbered as the groups.
    keys: KeySet,
    /// The `_id` of the first appearance, per group.
    ids: Vec<GroupId>,
    /// The `_id` values built so far.
    built: Vec<Bson>,
    accs: Vec<Acc>,
    fresh: Vec<Acc>,
    names: Vec<String>,
    buf: Vec<u8>,
    /// The output document with its values unset (`_id`, then the accumulators' names), built
    /// on first use: each output is a copy with its values put in place, where inserting
    /// field by field hashed every name and grew the map once per output.
    template: Option<Document>,
}

/// Values kept for the next table: its group states and key set with the room of a dropped
/// table's. A query with tens of thousands of groups grew them by doubling into fresh memory,
/// and the page faults, reallocations and copies were a tenth of its time.
struct Spares<T> {
    kept: parking_lot::Mutex<Vec<T>>,
}

/// Larger values are not kept (bytes).
const KEPT_BYTES: usize = 32 << 20;
/// Values kept: the last query's table and one more (a merged partial table).
const KEPT: usize = 2;

impl<T> Spares<T> {
    const fn new() -> Self {
        Spares {
            kept: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The roomiest kept value (by `room`), if any.
    fn take(&self, room: impl Fn(&T) -> usize) -> Option<T> {
        let mut kept = self.kept.lock();
        let roomiest = (0..kept.len()).max_by_key(|&i| kept.get(i).map_or(0, &room));
        roomiest.map(|i| kept.swap_remove(i))
    }

    /// Keeps `v`, emptied, whose room is `bytes`, unless it is too large or enough are kept.
    fn give(&self, v: T, bytes: usize) {
        if bytes == 0 || bytes > KEPT_BYTES {
            return;
        }
        let mut kept = self.kept.lock();
        if kept.len() < KEPT {
            kept.push(v);
        }
    }
}

static SPARE_STATES: Spares<Vec<Acc>> = Spares::new();
static SPARE_KEYS: Spares<KeySet> = Spares::new();

impl Drop for GroupTable {
    fn drop(&mut self) {
        let mut accs = std::mem::take(&mut self.accs);
        accs.clear();
        let bytes = accs.capacity() * std::mem::size_of::<Acc>();
        SPARE_STATES.give(accs, bytes);
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        let bytes = keys.room();
        SPARE_KEYS.give(keys, bytes);
    }
}

/// What a `$top`/`$bottom` accumulator is fed for a row: `[sort value..., output]`, the sort
/// values read as `$sort` reads them (`sort(path, ascending)`), for the argument `items` (the
/// sortBy paths, then the output) and bits `descending`.
pub(crate) fn top_input(
    items: &[Expr],
    descending: u32,
    row: &dyn Row,
    sort: impl Fn(&str, bool) -> Bson,
) -> Result<Bson> {
    let mut vals = Vec::with_capacity(items.len());
    let last = items.len().saturating_sub(1);
    for (k, e) in items.iter().enumerate() {
        vals.push(match e {
            Expr::Path(p) if k < last => sort(p, k >= 32 || descending & (1 << k) == 0),
            _ => e.eval(row)?.unwrap_or(Bson::Null),
        });
    }
    Ok(Bson::Array(vals))
}

impl GroupTable {
    /// An empty table whose groups start with `fresh` states for the output fields `names`.
    pub fn new(names: Vec<String>, fresh: Vec<Acc>) -> GroupTable {
        GroupTable {
            keys: SPARE_KEYS.take(KeySet::room).unwrap_or_default(),
            ids: Vec::new(),
            built: Vec::new(),
            accs: SPARE_STATES.take(Vec::capacity).unwrap_or_default(),
            fresh,
            names,
            template: None,
            buf: Vec::new(),
        }
    }

    /// About how many bytes the groups take: keys, `_id`s and accumulator states (values an
    /// accumulator holds outside its state, such as long strings, are not counted).
    pub fn approx_bytes(&self) -> usize {
        self.keys.bytes_used() * 2
            + self.ids.len() * std::mem::size_of::<GroupId>()
            + self.accs.len() * std::mem::size_of::<Acc>()
    }

    /// Fails with [`Error::MemoryLimit`] when the groups take more than `limit` bytes.
    pub fn check_memory(&self, limit: usize) -> Result<()> {
        let used = self.approx_bytes();
        if used > limit {
            return Err(Error::MemoryLimit(format!(
                "$group holds {} groups in about {} MiB, past the limit of {} MiB \
                 (DbOptions::sort_memory_limit); groups are not written to disk: group on \
                 fewer distinct keys, or raise the limit",
                self.len(),
                used >> 20,
                limit >> 20
            )));
        }
        Ok(())
    }

    /// A table for `spec` with ordinary (arrival-order) accumulators.
    pub fn for_spec(spec: &GroupSpec) -> GroupTable {
        GroupTable::new(
            spec.accs.iter().map(|a| a.name.clone()).collect(),
            spec.accs.iter().map(|a| Acc::new(a.op)).collect(),
        )
    }

    fn lookup(&self, key: &[u8]) -> (u64, Option<u32>) {
        self.keys.find(key)
    }

    /// Adds a group with fresh states.
    fn insert(&mut self, h: u64, key: &[u8], id: Bson) -> u32 {
        let id = self.keep(id);
        self.add(h, key, id)
    }

    /// Adds a group with `_id` `id` and fresh states.
    fn add(&mut self, h: u64, key: &[u8], id: GroupId) -> u32 {
        let g = self.push_key(h, key, id);
        self.accs.extend_from_slice(&self.fresh);
        g
    }

    /// Keeps a built `_id`.
    fn keep(&mut self, id: Bson) -> GroupId {
        self.built.push(id);
        GroupId::Built(self.built.len() as u32 - 1)
    }

    /// Adds a group's key and `_id`, not its states.
    fn push_key(&mut self, h: u64, key: &[u8], id: GroupId) -> u32 {
        self.ids.push(id);
        self.keys.insert_hashed(h, key)
    }

    /// [`GroupTable::insert`] with the group's states given.
    fn append(&mut self, h: u64, key: &[u8], id: GroupId, states: impl Iterator<Item = Acc>) {
        self.push_key(h, key, id);
        let w = self.fresh.len();
        let before = self.accs.len();
        self.accs.extend(states);
        // A short `later` (never made here) would leave the states misaligned: pad with fresh.
        let missing = (before + w).saturating_sub(self.accs.len());
        self.accs.extend(self.fresh.iter().take(missing).cloned());
    }

    /// The group whose key encodes as `key`, if there is one.
    pub fn find_key(&self, key: &[u8]) -> Option<u32> {
        self.lookup(key).1
    }

    /// Adds a group with encoded key `key` (which no group has) and `_id` value `id`.
    pub fn insert_key(&mut self, key: &[u8], id: Bson) -> u32 {
        let h = self.keys.hash(key);
        self.insert(h, key, id)
    }

    /// [`GroupTable::insert_key`] with the `_id` built at the end from template `part` and
    /// the bin starts `starts` (see [`Realize`]); `None` for more than two starts.
    pub fn insert_key_template(&mut self, key: &[u8], part: u32, starts: &[i64]) -> Option<u32> {
        let (n, starts) = match *starts {
            [] => (0, [0, 0]),
            [a] => (1, [a, 0]),
            [a, b] => (2, [a, b]),
            _ => return None,
        };
        let h = self.keys.hash(key);
        let id = GroupId::Template {
            origin: 0,
            n,
            part,
            starts,
        };
        Some(self.add(h, key, id))
    }

    /// Takes the `_id` of group `id` out of the table, built with `realize` if it is not yet.
    fn take_id(&mut self, id: GroupId, realize: Realize<'_>) -> Result<Bson> {
        match id {
            GroupId::Built(i) => Ok(self
                .built
                .get_mut(i as usize)
                .map(std::mem::take)
                .unwrap_or_default()),
            GroupId::Template {
                origin,
                n,
                part,
                starts,
            } => realize(
                origin,
                part,
                starts.get(..usize::from(n)).unwrap_or_default(),
            )
            .ok_or_else(|| {
                Error::BadValue(format!(
                    "internal error: the $group _id of key template {origin}/{part} cannot \
                         be built"
                ))
            }),
        }
    }

    /// The index of the group of `id`, created if new.
    pub fn slot(&mut self, id: &Bson) -> u32 {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        encode_key(id, &mut buf);
        let g = match self.lookup(&buf) {
            (_, Some(g)) => g,
            (h, None) => self.insert(h, &buf, id.clone()),
        };
        self.buf = buf;
        g
    }

    /// The index of the group whose key `e` gives on `row`, created if new. The key is
    /// encoded from borrowed values: the `_id` value is only built for a new group.
    pub fn slot_expr(&mut self, e: &Expr, row: &dyn Row) -> Result<u32> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let r = encode_top(e, row, &mut buf).and_then(|()| match self.lookup(&buf) {
            (_, Some(g)) => Ok(g),
            (h, None) => {
                let id = e.eval(row)?.unwrap_or(Bson::Null);
                Ok(self.insert(h, &buf, id))
            }
        });
        self.buf = buf;
        r
    }

    /// [`GroupTable::slot_expr`] without creating the group.
    pub fn find_expr(&mut self, e: &Expr, row: &dyn Row) -> Result<Option<u32>> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let r = encode_top(e, row, &mut buf).map(|()| self.lookup(&buf).1);
        self.buf = buf;
        r
    }

    /// The index of the group of `id` if it exists.
    pub fn find(&mut self, id: &Bson) -> Option<u32> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        encode_key(id, &mut buf);
        let g = self.lookup(&buf).1;
        self.buf = buf;
        g
    }

    /// The states of group `g`.
    pub fn accs(&mut self, g: u32) -> &mut [Acc] {
        let w = self.fresh.len();
        let start = g as usize * w;
        self.accs.get_mut(start..start + w).unwrap_or_default()
    }

    /// Feeds one document: evaluates the key and every accumulator's argument on it.
    pub fn feed_doc(&mut self, spec: &GroupSpec, d: &Document) -> Result<()> {
        let g = self.slot_expr(&spec.id, d)?;
        for (i, a) in spec.accs.iter().enumerate() {
            let v = match (a.op, &a.arg) {
                (AccOp::Top { descending, .. }, Expr::Array(items)) => {
                    let sort = |p: &str, asc: bool| sort_value(d, p, asc).into_owned();
                    Some(top_input(items, descending, d, sort)?)
                }
                _ => a.arg.eval(d)?,
            };
            if let Some(acc) = self.accs(g).get_mut(i) {
                acc.feed(v.as_ref());
            }
        }
        Ok(())
    }

    /// Groups in the table.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the table has no group.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Folds in the groups of `later`, a table of the same group over other input. Each
    /// table's groups are ranked by where they first appeared in the whole input: `rank[g]`
    /// for this table's group `g`, `later_rank[k]` for `later`'s group `k`. A group both hold
    /// takes the `_id` of its first appearance and the lower rank, and its states merge with
    /// the earlier one's first ([`Acc::merge`]); `later`'s other groups are added, and `rank`
    /// grows with them. [`GroupTable::into_docs_ranked`] then gives the groups in the order of
    /// the whole input.
    ///
    /// `_id`s that `later` would build from its own key templates are still built at output,
    /// by the builder of table `later_origin` (see [`Realize`]): template numbers differ
    /// between tables.
    ///
    /// Nothing is reserved for `later`'s groups: most of them are usually this table's too,
    /// and growing the vectors and the key set to the sum cost a copy and a rehash of them.
    pub fn merge(
        &mut self,
        rank: &mut Vec<u64>,
        later: GroupTable,
        later_rank: &[u64],
        later_origin: u16,
    ) {
        self.merge_known(rank, later, later_rank, later_origin, |_, _| None);
    }

    /// [`GroupTable::merge`], where `known(part, starts)` may name this table's group of
    /// `later`'s group with a key template `part` and bin starts `starts` (see
    /// [`GroupTable::insert_key_template`]): found so, the group's key is not looked up.
    /// `None` means not known (the key is looked up), never "no such group".
    pub fn merge_known(
        &mut self,
        rank: &mut Vec<u64>,
        mut later: GroupTable,
        later_rank: &[u64],
        later_origin: u16,
        mut known: impl FnMut(u32, &[i64]) -> Option<u32>,
    ) {
        let w = self.fresh.len();
        let mut states = std::mem::take(&mut later.accs).into_iter();
        let later_keys = std::mem::take(&mut later.keys);
        let later_group_ids = std::mem::take(&mut later.ids);
        for (k, (key, id)) in later_keys.iter().zip(later_group_ids).enumerate() {
            let r = later_rank.get(k).copied().unwrap_or(u64::MAX);
            let found = match id {
                GroupId::Template {
                    origin: 0,
                    n,
                    part,
                    starts,
                } => starts
                    .get(..usize::from(n))
                    .and_then(|starts| known(part, starts))
                    .filter(|&g| (g as usize) < self.ids.len()),
                _ => None,
            };
            let (h, g) = match found {
                Some(g) => (0, Some(g)),
                None => self.lookup(key),
            };
            let Some(g) = g else {
                rank.push(r);
                let id = self.adopt(&mut later, id, later_origin);
                self.append(h, key, id, states.by_ref().take(w));
                continue;
            };
            let earlier = rank.get_mut(g as usize).is_some_and(|x| {
                let earlier = r < *x;
                *x = (*x).min(r);
                earlier
            });
            if earlier {
                let id = self.adopt(&mut later, id, later_origin);
                if let Some(x) = self.ids.get_mut(g as usize) {
                    *x = id;
                }
            }
            for acc in self.accs(g) {
                if let Some(st) = states.next() {
                    match earlier {
                        true => {
                            let mine = std::mem::replace(acc, st);
                            acc.merge(mine);
                        }
                        false => acc.merge(st),
                    }
                }
            }
        }
        // Back in `later`, which gives its room to the spares when dropped.
        later.keys = later_keys;
    }

    /// `later`'s `_id` `id`, for this table: a built one moves, a template is marked with its
    /// table.
    fn adopt(&mut self, later: &mut GroupTable, id: GroupId, origin: u16) -> GroupId {
        match id {
            GroupId::Built(i) => {
                let v = later.built.get_mut(i as usize).map(std::mem::take);
                self.keep(v.unwrap_or_default())
            }
            GroupId::Template {
                n, part, starts, ..
            } => GroupId::Template {
                origin,
                n,
                part,
                starts,
            },
        }
    }

    /// The output documents in order of `rank` (see [`GroupTable::merge`]), or in the
    /// table's order when `rank` is empty, each built when it is read (see [`GroupDocs`]).
    pub fn into_docs_ranked(self, rank: &[u64], realize: OwnedRealize) -> GroupDocs {
        let mut order: Vec<u32> = Vec::new();
        if !rank.is_empty() {
            order = (0..self.ids.len() as u32).collect();
            order.sort_unstable_by_key(|&g| rank.get(g as usize).copied().unwrap_or(u64::MAX));
            if order.iter().enumerate().all(|(i, &g)| i == g as usize) {
                order = Vec::new();
            }
        }
        GroupDocs {
            table: self,
            order,
            next: 0,
            realize,
        }
    }

    /// The groups in the order of a `$sort` on `keys`, all paths of `_id`, read from the
    /// groups' encoded keys without building a document; ties keep their order in `current`
    /// (the table's order when empty). `None` when a key is not a path of `_id` or a value is
    /// not encoded exactly (an array, a large number, code): those are sorted as documents.
    fn order_by_id(&self, keys: &[(String, bool)], current: &[u32]) -> Option<Vec<u32>> {
        let n = self.len();
        if keys.is_empty() || (!current.is_empty() && current.len() != n) {
            return None;
        }
        let group = |p: usize| match current.is_empty() {
            true => Some(p as u32),
            false => current.get(p).copied(),
        };
        let mut order = KeyOrder::with_capacity(n);
        for p in 0..n {
            let key = self.keys.get(group(p)?)?;
            let exact = order.push(keys, |k, out| {
                keys.get(k)
                    .is_some_and(|(path, _)| put_sort_key(key, path, out))
            });
            if !exact {
                return None;
            }
        }
        order
            .order()
            .into_iter()
            .map(|p| group(p as usize))
            .collect()
    }

    fn doc(
        template: &mut Option<Document>,
        names: &[String],
        id: Bson,
        accs: &[Acc],
    ) -> Result<Document> {
        let template = template.get_or_insert_with(|| {
            let mut d = Document::new();
            d.insert("_id", Bson::Null);
            for name in names {
                d.insert(name.clone(), Bson::Null);
            }
            d
        });
        // Unless an accumulator is named `_id` or twice, which would merge entries.
        if template.len() == names.len() + 1 {
            let mut d = template.clone();
            let mut slots = d.iter_mut().map(|(_, v)| v);
            if let Some(slot) = slots.next() {
                *slot = id;
            }
            for (slot, a) in slots.zip(accs) {
                *slot = a.value()?;
            }
            return Ok(d);
        }
        let mut d = Document::new();
        d.insert("_id", id);
        for (name, a) in names.iter().zip(accs) {
            d.insert(name.clone(), a.value()?);
        }
        Ok(d)
    }

    /// The output documents `{_id, field: value, ...}`, in order of first appearance.
    pub fn into_docs(self) -> Result<Vec<Document>> {
        self.docs().collect()
    }

    /// [`GroupTable::into_docs`], each built when it is read, for a table whose `_id`s were
    /// all given built.
    pub fn docs(self) -> GroupDocs {
        self.into_docs_ranked(&[], Box::new(|_, _, _| None))
    }

    /// The output document of group `g`, its `_id` taken out of the table.
    fn take_doc(&mut self, g: u32, realize: Realize<'_>) -> Result<Document> {
        let id = self.ids.get(g as usize).copied().ok_or_else(|| {
            Error::BadValue(format!("internal error: the $group has no group {g}"))
        })?;
        let id = self.take_id(id, realize)?;
        let w = self.fresh.len();
        let g = g as usize;
        let accs = self.accs.get(g * w..(g + 1) * w).unwrap_or_default();
        Self::doc(&mut self.template, &self.names, id, accs)
    }
}

/// The output documents of a [`GroupTable`], each built when it is read. A reader that drops
/// each document before taking the next (counting, writing out, folding) reuses the same few
/// freed blocks for the next one's dozen small allocations, where building them all first and
/// dropping them all later made the allocator split, spread and then coalesce tens of
/// megabytes.
pub struct GroupDocs {
    table: GroupTable,
    /// Groups in output order; empty for the table's order.
    order: Vec<u32>,
    next: usize,
    realize: OwnedRealize,
}

impl GroupDocs {
    /// Puts these documents in the order of a `$sort` on `keys` when every key is a path of
    /// `_id` whose values can be ordered from the table's encoded keys, and says whether it
    /// did: the sort then costs an encoding and a sort of bytes per group, where sorting the
    /// built documents read their values again and held them all. Unchanged otherwise, and
    /// once reading has begun.
    pub fn sort_by_id(&mut self, keys: &[(String, bool)]) -> bool {
        if self.next != 0 {
            return false;
        }
        match self.table.order_by_id(keys, &self.order) {
            Some(order) => {
                self.order = order;
                true
            }
            None => false,
        }
    }
}

impl Iterator for GroupDocs {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        let g = match self.order.is_empty() {
            true => (self.next < self.table.len()).then_some(self.next as u32)?,
            false => *self.order.get(self.next)?,
        };
        self.next += 1;
        Some(self.table.take_doc(g, &*self.realize))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.table.len().saturating_sub(self.next);
        (left, Some(left))
    }
}

/// Appends the encoding of the key `e` gives on `row` (missing is null), as [`encode_key`]
/// would encode the evaluated value.
fn encode_top(e: &Expr, row: &dyn Row, out: &mut Vec<u8>) -> Result<()> {
    if !encode_expr(e, row, out, &mut None)? {
        encode_key(&Bson::Null, out);
    }
    Ok(())
}

/// Where the values of the time leaves of a key landed in its encoding.
struct Leaves<'a> {
    time_field: &'a str,
    /// Offset of each leaf's 8 date bytes, in expression order.
    at: Vec<usize>,
    /// Every leaf gave a date.
    ok: bool,
}

impl Leaves<'_> {
    fn is_leaf(&self, e: &Expr) -> bool {
        match e {
            Expr::Path(p) => p == self.time_field,
            Expr::DateTrunc(d) => matches!(&d.date, Expr::Path(p) if p == self.time_field),
            _ => false,
        }
    }

    fn note(&mut self, out: &[u8], start: usize) {
        // A date encodes as its rank byte and 8 bytes.
        if out.len() == start + 9
            && out.get(start) == Some(&type_rank(&Bson::DateTime(bson::DateTime::from_millis(0))))
        {
            self.at.push(start + 1);
        } else {
            self.ok = false;
        }
    }
}

/// Appends the encoding of `e`'s value on `row`; false (nothing written) when it is missing.
/// With `leaves`, notes where the time leaves' values went.
fn encode_expr(
    e: &Expr,
    row: &dyn Row,
    out: &mut Vec<u8>,
    leaves: &mut Option<Leaves<'_>>,
) -> Result<bool> {
    let start = out.len();
    if let Some(l) = leaves.as_mut() {
        if l.is_leaf(e) {
            let v = e.eval(row)?;
            if let Some(v) = &v {
                encode_key(v, out);
            }
            l.note(out, start);
            return Ok(v.is_some());
        }
    }
    match e {
        Expr::Const(v) => encode_key(v, out),
        Expr::Path(p) => {
            let mut present = false;
            row.visit(p, &mut |v| {
                if let Some(v) = v {
                    encode_key(v, out);
                    present = true;
                }
            });
            return Ok(present);
        }
        Expr::Doc(fields) => {
            out.push(type_rank(&Bson::Document(Document::new())));
            for (k, x) in fields {
                let mark = out.len();
                out.push(1);
                put_str(out, k);
                // A missing value leaves the field out of the document.
                if !encode_expr(x, row, out, leaves)? {
                    out.truncate(mark);
                }
            }
            out.push(0);
        }
        Expr::Array(items) => {
            out.push(type_rank(&Bson::Array(Vec::new())));
            for x in items {
                out.push(1);
                if !encode_expr(x, row, out, leaves)? {
                    encode_key(&Bson::Null, out);
                }
            }
            out.push(0);
        }
        Expr::DateTrunc(_) => match e.eval(row)? {
            Some(v) => encode_key(&v, out),
            None => return Ok(false),
        },
    }
    Ok(true)
}

/// Writes to `out` the key's encoding on `row` and to `at` the offsets of the 8 bytes of each
/// use of `time_field` in it (the field itself, or `$dateTrunc` of it), in expression order;
/// keys that differ only in those times differ only there. False when some use gave no date.
pub fn key_template(
    e: &Expr,
    row: &dyn Row,
    time_field: &str,
    out: &mut Vec<u8>,
    at: &mut Vec<usize>,
) -> Result<bool> {
    out.clear();
    at.clear();
    let mut leaves = Some(Leaves {
        time_field,
        at: std::mem::take(at),
        ok: true,
    });
    let r = encode_expr(e, row, out, &mut leaves);
    let Some(l) = leaves else { return Ok(false) };
    *at = l.at;
    if !r? {
        encode_key(&Bson::Null, out);
    }
    Ok(l.ok)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends the canonical encoding of `v`: equal under MongoDB's comparison <=> equal bytes
/// (numbers integral and in range encode as i64, others as f64 bits, NaN as one value).
pub fn encode_key(v: &Bson, out: &mut Vec<u8>) {
    out.push(type_rank(v));
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            let exact = match v {
                Bson::Int32(i) => Some(i64::from(*i)),
                Bson::Int64(i) => Some(*i),
                _ => None,
            };
            let f = as_f64(v).unwrap_or(f64::NAN);
            // 2^63 as f64: integral doubles below it (and at or above -2^63) fit an i64.
            let limit = 9_223_372_036_854_775_808.0;
            match exact {
                Some(i) => {
                    out.push(b'i');
                    out.extend_from_slice(&i.to_le_bytes());
                }
                None if f.fract() == 0.0 && f >= -limit && f < limit => {
                    out.push(b'i');
                    out.extend_from_slice(&(f as i64).to_le_bytes());
                }
                None if f.is_nan() => out.push(b'n'),
                None => {
                    out.push(b'f');
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => put_str(out, s),
        Bson::Document(d) => {
            for (k, x) in d {
                out.push(1);
                put_str(out, k);
                encode_key(x, out);
            }
            out.push(0);
        }
        Bson::Array(a) => {
            for x in a {
                out.push(1);
                encode_key(x, out);
            }
            out.push(0);
        }
        Bson::DateTime(t) => out.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::Timestamp(t) => {
            out.extend_from_slice(&t.time.to_le_bytes());
            out.extend_from_slice(&t.increment.to_le_bytes());
        }
        Bson::Binary(b) => {
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&(b.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&b.bytes);
        }
        Bson::RegularExpression(r) => {
            put_str(out, r.pattern.as_str());
            put_str(out, r.options.as_str());
        }
        Bson::JavaScriptCodeWithScope(c) => {
            put_str(out, &c.code);
            encode_key(&Bson::Document(c.scope.clone()), out);
        }
        Bson::DbPointer(p) => put_str(out, &format!("{p:?}")),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
    }
}

/// The length of the value [`encode_key`] wrote at the start of `v`; `None` if `v` is cut
/// short.
fn key_len(v: &[u8]) -> Option<usize> {
    let str_len = |at: usize| -> Option<usize> {
        let n = u32::from_le_bytes(v.get(at..at + 4)?.try_into().ok()?) as usize;
        Some(4 + n)
    };
    let &rank = v.first()?;
    let body = match rank {
        10 => match v.get(1)? {
            b'n' => 1,
            _ => 9,
        },
        15 | 55 | 60 => str_len(1)?,
        20 | 25 => {
            let mut at = 1;
            loop {
                match v.get(at)? {
                    0 => break at,
                    _ if rank == 20 => {
                        at += 1 + str_len(at + 1)?;
                        at += key_len(v.get(at..)?)?;
                    }
                    _ => at += 1 + key_len(v.get(at + 1..)?)?,
                }
            }
        }
        30 => 1 + str_len(2)?,
        35 => 12,
        40 => 1,
        45 | 47 => 8,
        50 => {
            let a = str_len(1)?;
            a + str_len(1 + a)?
        }
        65 => {
            let a = str_len(1)?;
            a + key_len(v.get(1 + a..)?)?
        }
        _ => 0,
    };
    Some(1 + body)
}

/// Appends the normalised sort bytes (as a sort of documents writes them, see
/// [`crate::query::sort::norm`]) of the value at `path` in the `_id` whose [`encode_key`] bytes are
/// `key`. False where the path is not one of `_id` or meets an array, or the value is not
/// encoded exactly (large numbers, code): such keys are sorted as documents.
fn put_sort_key(key: &[u8], path: &str, out: &mut Vec<u8>) -> bool {
    let below = match path.strip_prefix("_id") {
        Some("") => None,
        Some(rest) => match rest.strip_prefix('.') {
            Some(rest) => Some(rest),
            None => return false,
        },
        None => return false,
    };
    let mut v = key;
    for name in below.into_iter().flat_map(|b| b.split('.')) {
        match v.first() {
            Some(20) => {}
            Some(25) | None => return false,
            // A scalar with more path below it: nothing there, which sorts as null.
            Some(_) => v = &[5],
        }
        let mut at = 1;
        let mut found = None;
        while let Some(1) = v.get(at) {
            let Some(n) = v.get(at + 1..at + 5).and_then(|b| b.try_into().ok()) else {
                return false;
            };
            let n = u32::from_le_bytes(n) as usize;
            let value = at + 5 + n;
            let Some(len) = v.get(value..).and_then(key_len) else {
                return false;
            };
            if v.get(at + 5..value) == Some(name.as_bytes()) {
                found = v.get(value..value + len);
                break;
            }
            at = value + len;
        }
        // A missing field sorts as null.
        v = found.unwrap_or(&[5]);
    }
    put_sort_value(v, out)
}

/// Appends the normalised bytes of the [`encode_key`] value at the start of `v`; false where
/// they would not be exact.
fn put_sort_value(v: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(&rank) = v.first() else {
        return false;
    };
    out.push(norm::bracket(rank));
    put_sort_content(v, out)
}

fn put_sort_content(v: &[u8], out: &mut Vec<u8>) -> bool {
    let word = |at: usize| -> Option<[u8; 8]> { v.get(at..at + 8)?.try_into().ok() };
    let word4 = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(v.get(at..at + 4)?.try_into().ok()?))
    };
    let text = |at: usize| -> Option<&[u8]> { v.get(at + 4..at + 4 + word4(at)? as usize) };
    let Some(&rank) = v.first() else {
        return false;
    };
    match rank {
        0 | 1 | 5 | 127 => {}
        10 => {
            let f = match (v.get(1), word(2)) {
                (Some(b'n'), _) => f64::NAN,
                #[allow(
                    clippy::cast_precision_loss,
                    reason = "only integers below 2^53, which convert exactly, are kept"
                )]
                (Some(b'i'), Some(w)) => i64::from_le_bytes(w) as f64,
                (Some(b'f'), Some(w)) => f64::from_bits(u64::from_le_bytes(w)),
                _ => return false,
            };
            if !(f.is_nan() || f.abs() < norm::EXACT) {
                return false;
            }
            out.extend_from_slice(&norm::ordered_f64(f).to_be_bytes());
        }
        15 => match text(1) {
            Some(t) => norm::put_str(t, out),
            None => return false,
        },
        20 => {
            let mut at = 1;
            while let Some(1) = v.get(at) {
                let (Some(name), Some(n)) = (text(at + 1), word4(at + 1)) else {
                    return false;
                };
                let value = at + 5 + n as usize;
                let Some(x) = v.get(value..) else {
                    return false;
                };
                let (Some(&r), Some(len)) = (x.first(), key_len(x)) else {
                    return false;
                };
                // Element by element: type bracket, name, value.
                out.push(norm::bracket(r));
                norm::put_str(name, out);
                if !put_sort_content(x, out) {
                    return false;
                }
                at = value + len;
            }
            out.push(0);
        }
        30 => match (v.get(1), word4(2), text(2)) {
            (Some(&subtype), Some(n), Some(bytes)) => {
                out.extend_from_slice(&n.to_be_bytes());
                out.push(subtype);
                out.extend_from_slice(bytes);
            }
            _ => return false,
        },
        35 => match v.get(1..13) {
            Some(b) => out.extend_from_slice(b),
            None => return false,
        },
        40 => match v.get(1) {
            Some(&b) => out.push(b),
            None => return false,
        },
        45 => match word(1) {
            Some(w) => {
                out.extend_from_slice(&((i64::from_le_bytes(w) as u64) ^ (1 << 63)).to_be_bytes())
            }
            None => return false,
        },
        47 => match (word4(1), word4(5)) {
            (Some(t), Some(i)) => {
                out.extend_from_slice(&((u64::from(t) << 32) | u64::from(i)).to_be_bytes())
            }
            _ => return false,
        },
        50 => {
            let Some(n) = word4(1) else {
                return false;
            };
            match (text(1), text(5 + n as usize)) {
                (Some(p), Some(o)) => {
                    norm::put_str(p, out);
                    norm::put_str(o, out);
                }
                _ => return false,
            }
        }
        // Arrays sort by an element, code by more than its bytes: sorted as documents.
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::aggregate::accumulators::AccOp;
    use bson::doc;
    use proptest::prelude::*;

    /// `{$group: {_id: "$k", n: {$sum: arg}}}`
    fn sum_by_k(arg: Expr) -> GroupSpec {
        GroupSpec {
            id: Expr::Path("k".into()),
            accs: vec![AccSpec {
                name: "n".into(),
                op: AccOp::Sum,
                arg,
            }],
        }
    }

    fn ranked(t: GroupTable, rank: &[u64]) -> Vec<Document> {
        t.into_docs_ranked(rank, Box::new(|_, _, _| None))
            .collect::<Result<_>>()
            .unwrap()
    }

    /// Ranks of the groups of a table that saw the input from position `from` on, in order.
    fn ranks(t: &GroupTable, from: u64) -> Vec<u64> {
        (0..t.len() as u64).map(|g| from + g).collect()
    }

    /// Output documents copied from the table's template hold `_id` first, then each
    /// accumulator's value under its own name, in the spec's order.
    #[test]
    fn output_documents_name_each_value_in_order() {
        let acc = |name: &str, op| AccSpec {
            name: name.into(),
            op,
            arg: Expr::Path("x".into()),
        };
        let spec = GroupSpec {
            id: Expr::Path("k".into()),
            accs: vec![
                acc("total", AccOp::Sum),
                acc("low", AccOp::Min),
                acc("high", AccOp::Max),
                acc("first", AccOp::First),
            ],
        };
        let mut t = GroupTable::for_spec(&spec);
        for (k, x) in [("a", 5), ("b", 1), ("a", 2), ("a", 9)] {
            t.feed_doc(&spec, &doc! {"k": k, "x": x}).unwrap();
        }
        let docs = t.into_docs().unwrap();
        let keys: Vec<Vec<&str>> = docs
            .iter()
            .map(|d| d.keys().map(String::as_str).collect())
            .collect();
        assert_eq!(keys, vec![vec!["_id", "total", "low", "high", "first"]; 2]);
        assert_eq!(
            docs,
            vec![
                doc! {"_id": "a", "total": 16, "low": 2, "high": 9, "first": 5},
                doc! {"_id": "b", "total": 1, "low": 1, "high": 1, "first": 1},
            ]
        );
    }

    #[test]
    fn a_table_on_a_dropped_tables_room_starts_empty() {
        let spec = sum_by_k(Expr::Path("x".into()));
        let fill = |keys: std::ops::Range<i32>| {
            let mut t = GroupTable::for_spec(&spec);
            for k in keys {
                let g = t.slot(&Bson::Int32(k));
                t.accs(g)[0].feed(Some(&Bson::Int32(k * 10)));
            }
            t
        };
        // Tables dropped by other tests may be the ones reused: either way, the states of
        // the big one are spare after it is dropped, and every later table is as new.
        drop(fill(0..5000));
        for _ in 0..3 {
            let t = fill(7..9);
            assert_eq!(t.len(), 2);
            assert_eq!(
                t.into_docs().unwrap(),
                vec![doc! {"_id": 7, "n": 70}, doc! {"_id": 8, "n": 80}]
            );
        }
    }

    #[test]
    fn merged_tables_keep_first_appearance_order_and_merge_states() {
        let spec = sum_by_k(Expr::Path("x".into()));
        let rows = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("d", 6)];
        let split = |cut: usize| {
            let (mut first, mut later) = (GroupTable::for_spec(&spec), GroupTable::for_spec(&spec));
            for (i, (k, x)) in rows.iter().enumerate() {
                let t = if i < cut { &mut first } else { &mut later };
                t.feed_doc(&spec, &doc! {"k": *k, "x": *x}).unwrap();
            }
            (first, later)
        };
        let mut want = GroupTable::for_spec(&spec);
        for (k, x) in rows {
            want.feed_doc(&spec, &doc! {"k": k, "x": x}).unwrap();
        }
        let want = want.into_docs().unwrap();
        for cut in 0..=rows.len() {
            // Merged either way round, the ranks give the input's order.
            let (mut first, later) = split(cut);
            let (rf, rl) = (ranks(&first, 0), ranks(&later, 100));
            let mut rank = rf.clone();
            first.merge(&mut rank, later, &rl, 1);
            assert_eq!(ranked(first, &rank), want, "cut {cut}");
            let (first, mut later) = split(cut);
            let mut rank = rl;
            later.merge(&mut rank, first, &rf, 1);
            assert_eq!(ranked(later, &rank), want, "cut {cut}, reversed");
        }
        // Numerically equal keys are one group; the `_id` first seen stays, whichever table
        // saw it.
        let one = |k: Bson, x: i32| {
            let mut t = GroupTable::for_spec(&spec);
            t.feed_doc(&spec, &doc! {"k": k, "x": x}).unwrap();
            t
        };
        let mut a = one(Bson::Int32(1), 1);
        let mut rank = vec![0];
        a.merge(&mut rank, one(Bson::Double(1.0), 2), &[1], 1);
        assert_eq!(ranked(a, &rank), vec![doc! {"_id": 1, "n": 3}]);
        let mut a = one(Bson::Int32(1), 1);
        let mut rank = vec![5];
        a.merge(&mut rank, one(Bson::Double(1.0), 2), &[1], 1);
        assert_eq!(rank, vec![1]);
        assert_eq!(ranked(a, &rank), vec![doc! {"_id": 1.0, "n": 3}]);
    }

    #[test]
    fn template_ids_are_built_by_their_own_table_s_builder() {
        let spec = sum_by_k(Expr::Const(Bson::Int32(1)));
        // Each table numbers its templates itself: part 1 is "a" in table 0 and "b" in
        // table 1.
        let names = |tables: &'static [&'static [&'static str]]| -> OwnedRealize {
            Box::new(move |origin, part, starts| {
                let t = tables.get(usize::from(origin))?;
                let name = t.get((part as usize).checked_sub(1)?)?;
                let at = bson::DateTime::from_millis(*starts.first()?);
                Some(Bson::Document(doc! {"k": *name, "t": at}))
            })
        };
        // Keys encode the `_id`, not the template's number.
        let fill = |names: &[&str], parts: &[(u32, i64)]| {
            let mut t = GroupTable::for_spec(&spec);
            for &(p, start) in parts {
                let name = names.get(p as usize - 1).copied().unwrap_or("?");
                let k = key(Bson::String(format!("{name}/{start}")));
                let g = t.insert_key_template(&k, p, &[start]).unwrap();
                t.accs(g)[0].feed(Some(&Bson::Int32(1)));
            }
            t
        };
        let (a_names, b_names): (&[&str], &[&str]) = (&["a", "b"], &["b", "a"]);
        let mut a = fill(a_names, &[(1, 10), (2, 20)]);
        // The same two groups in the other table's numbering, and one new one.
        let b = fill(b_names, &[(2, 10), (1, 20), (1, 30)]);
        // "a" at 10 was seen first by the other table, whose `_id` then replaces this one's.
        let mut rank = vec![5, 1];
        a.merge(&mut rank, b, &[2, 3, 4], 1);
        assert_eq!(rank, vec![2, 1, 4]);
        let got: Vec<Document> = a
            .into_docs_ranked(&rank, names(&[&["a", "b"], &["b", "a"]]))
            .collect::<Result<_>>()
            .unwrap();
        let at = bson::DateTime::from_millis;
        assert_eq!(
            got,
            vec![
                doc! {"_id": {"k": "b", "t": at(20)}, "n": 2},
                doc! {"_id": {"k": "a", "t": at(10)}, "n": 2},
                doc! {"_id": {"k": "b", "t": at(30)}, "n": 1},
            ]
        );
        // A template its builder cannot build is an error, not a wrong `_id`.
        let t = fill(&["a", "b", "c"], &[(3, 10)]);
        let r: Result<Vec<Document>> = t.into_docs_ranked(&[], names(&[&["a", "b"]])).collect();
        assert!(r.is_err());
        // More than two bin starts are not kept as a template.
        let mut t = GroupTable::for_spec(&spec);
        assert_eq!(t.insert_key_template(b"k", 1, &[1, 2, 3]), None);
        assert_eq!(t.len(), 0);
    }

    fn key(v: Bson) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(&v, &mut out);
        out
    }

    #[test]
    fn equal_values_share_a_key() {
        assert_eq!(key(Bson::Int32(1)), key(Bson::Double(1.0)));
        assert_eq!(key(Bson::Int64(1)), key(Bson::Int32(1)));
        assert_eq!(key(Bson::Double(-0.0)), key(Bson::Int32(0)));
        assert_eq!(key(Bson::Double(f64::NAN)), key(Bson::Double(-f64::NAN)));
        assert_eq!(key(Bson::Symbol("a".into())), key(Bson::String("a".into())));
        assert_eq!(
            key(Bson::Document(doc! {"a": 1, "b": [2.0]})),
            key(Bson::Document(doc! {"a": 1.0, "b": [2_i64]}))
        );
    }

    #[test]
    fn different_values_do_not() {
        assert_ne!(key(Bson::Double(1.5)), key(Bson::Int32(1)));
        assert_ne!(key(Bson::Null), key(Bson::Undefined));
        assert_ne!(key(Bson::String("1".into())), key(Bson::Int32(1)));
        assert_ne!(
            key(Bson::Document(doc! {"a": 1, "b": 2})),
            key(Bson::Document(doc! {"b": 2, "a": 1}))
        );
        assert_ne!(
            key(Bson::Document(doc! {"a": null})),
            key(Bson::Document(doc! {}))
        );
        assert_ne!(
            key(Bson::Array(vec!["ab".into()])),
            key(Bson::Array(vec!["a".into(), "b".into()]))
        );
    }

    #[test]
    fn keys_encoded_from_expressions_equal_keys_of_values() {
        let d = doc! {"a": {"b": 1, "c": [{"x": 2}, {"y": 3}]}, "s": "t"};
        for spec in [
            Bson::String("$a.b".into()),
            Bson::String("$nope".into()),
            Bson::String("$a.c.x".into()),
            Bson::Document(doc! {"k": "$s", "m": "$nope", "n": ["$nope", 1.0]}),
            Bson::Null,
            Bson::Document(doc! {"$dateTrunc": {"date": "$nope", "unit": "day"}}),
        ] {
            let e = Expr::parse(&spec).unwrap();
            let mut direct = Vec::new();
            encode_top(&e, &d, &mut direct).unwrap();
            assert_eq!(
                direct,
                key(e.eval(&d).unwrap().unwrap_or(Bson::Null)),
                "{spec}"
            );
        }
    }

    #[test]
    fn templates_give_the_keys_of_other_times() {
        let spec =
            doc! {"h": "$m.h", "t": {"$dateTrunc": {"date": "$t", "unit": "minute"}}, "r": ["$t"]};
        let e = Expr::parse(&Bson::Document(spec)).unwrap();
        let row = |t: i64| doc! {"m": {"h": "x"}, "t": bson::DateTime::from_millis(t)};
        let (mut bytes, mut at) = (Vec::new(), Vec::new());
        assert!(key_template(&e, &row(120_000), "t", &mut bytes, &mut at).unwrap());
        assert_eq!(at.len(), 2);
        let t: i64 = 7 * 60_000 + 5;
        bytes[at[0]..at[0] + 8].copy_from_slice(&(7 * 60_000_i64).to_le_bytes());
        bytes[at[1]..at[1] + 8].copy_from_slice(&t.to_le_bytes());
        assert_eq!(bytes, key(e.eval(&row(t)).unwrap().unwrap()));
        let no_time = doc! {"m": {"h": "x"}};
        assert!(!key_template(&e, &no_time, "t", &mut bytes, &mut at).unwrap());
    }

    #[test]
    fn groups_keep_the_first_id_and_order() {
        let spec = sum_by_k(Expr::Const(Bson::Int32(1)));
        let mut t = GroupTable::for_spec(&spec);
        for d in [
            doc! {"k": 2},
            doc! {"k": 1.0},
            doc! {"k": 2.0},
            doc! {},
            doc! {"k": 1},
        ] {
            t.feed_doc(&spec, &d).unwrap();
        }
        assert_eq!(
            t.into_docs().unwrap(),
            vec![
                doc! {"_id": 2, "n": 2},
                doc! {"_id": 1.0, "n": 2},
                doc! {"_id": null, "n": 1},
            ]
        );
    }

    /// A table of `{$group: {_id: "$k", n: {$sum: 1}}}` over `{k: id}` for each of `ids`.
    fn table_of(ids: &[Bson]) -> GroupTable {
        let spec = sum_by_k(Expr::Const(Bson::Int32(1)));
        let mut t = GroupTable::for_spec(&spec);
        for id in ids {
            t.feed_doc(&spec, &doc! {"k": id.clone()}).unwrap();
        }
        t
    }

    #[test]
    fn group_output_sorts_by_id_paths_from_the_keys() {
        let day = |d: i64| Bson::DateTime(bson::DateTime::from_millis(d * 86_400_000));
        let ids: Vec<Bson> = [(2, "b"), (1, "z"), (2, "a"), (-1, "a\0"), (1, "")]
            .into_iter()
            .map(|(d, c)| Bson::Document(doc! {"period": day(d), "cmd": c}))
            .collect();
        let sort = vec![("_id.period".to_string(), true), ("_id.cmd".to_string(), false)];
        let mut docs = table_of(&ids).docs();
        assert!(docs.sort_by_id(&sort), "dates and strings are sorted from the keys");
        let got: Vec<Document> = docs.collect::<Result<_>>().unwrap();
        let mut want = table_of(&ids).into_docs().unwrap();
        crate::query::sort::sort_docs(&mut want, &sort);
        assert_eq!(got, want);
        let cmds: Vec<&str> = got.iter().map(|d| d.get_document("_id").unwrap().get_str("cmd").unwrap()).collect();
        assert_eq!(cmds, ["a\0", "z", "", "b", "a"]);
        // Keys that are not paths of `_id`, or values that are arrays, sort as documents.
        let by_n = vec![("n".to_string(), true)];
        assert!(!table_of(&ids).docs().sort_by_id(&by_n));
        let arrays = [Bson::Array(vec![Bson::Int32(1)])];
        assert!(!table_of(&arrays).docs().sort_by_id(&[("_id".into(), true)]));
    }

    fn sort_key() -> impl proptest::strategy::Strategy<Value = (String, bool)> {
        (
            prop_oneof![Just("_id"), Just("_id.a"), Just("_id.b"), Just("_id.a.x"), Just("_id.x")],
            any::<bool>(),
        )
            .prop_map(|(k, asc)| (k.to_string(), asc))
    }

    /// Values whose sort bytes are exact: no arrays, numbers below 2^53.
    fn exact_value() -> impl Strategy<Value = Bson> {
        prop_oneof![
            Just(Bson::Null),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            (-3i32..3).prop_map(Bson::Int32),
            (-3i64..3).prop_map(Bson::Int64),
            prop_oneof![Just(f64::NAN), Just(-0.0), Just(2.5), Just(-1.0), Just(1e300)]
                .prop_map(Bson::Double),
            "[ab\\x00]{0,3}".prop_map(Bson::String),
            (-3i64..3).prop_map(|t| Bson::DateTime(bson::DateTime::from_millis(t))),
            any::<bool>().prop_map(Bson::Boolean),
            (0u32..2, 0u32..2).prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp {
                time,
                increment
            })),
            (0u8..3).prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes([b; 12]))),
            prop::collection::vec(0u8..3, 0..3).prop_map(|bytes| Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes
            })),
            ("[ab]{0,2}", (-1i32..2)).prop_map(|(n, x)| {
                let mut d = doc! {"x": x};
                if !n.is_empty() {
                    d.insert(n, Bson::Int32(x));
                }
                Bson::Document(d)
            }),
        ]
    }

    proptest::proptest! {
        /// Sorting a group's output from its keys gives what sorting its documents gives, ties
        /// in the same order, whenever it takes the sort on.
        #[test]
        fn sorting_from_keys_matches_sorting_documents(
            ids in prop_oneof![
                proptest::collection::vec(
                    prop_oneof![
                        crate::query::sort::tests::value(),
                        (crate::query::sort::tests::value(), crate::query::sort::tests::value())
                            .prop_map(|(a, b)| Bson::Document(doc! {"a": a, "b": b})),
                    ],
                    0..12,
                ),
                proptest::collection::vec(
                    prop_oneof![
                        exact_value(),
                        (exact_value(), exact_value())
                            .prop_map(|(a, b)| Bson::Document(doc! {"a": a, "b": b})),
                    ],
                    0..12,
                ),
            ],
            sort in proptest::collection::vec(sort_key(), 1..3),
        ) {
            let mut want = table_of(&ids).into_docs().unwrap();
            crate::query::sort::sort_docs(&mut want, &sort);
            // Arrays and numbers past 2^53 are left to the sort of documents.
            let exact = |v: &Bson| {
                let text = format!("{v:?}");
                !text.contains("Array")
                    && crate::order::as_f64(v).is_none_or(|f| f.is_nan() || f.abs() < norm::EXACT)
                    && !matches!(v, Bson::Document(d) if d.values().any(|x| {
                        crate::order::as_f64(x).is_some_and(|f| !f.is_nan() && f.abs() >= norm::EXACT)
                    }))
            };
            let mut docs = table_of(&ids).docs();
            match docs.sort_by_id(&sort) {
                true => {
                    let got: Vec<Document> = docs.collect::<Result<_>>().unwrap();
                    // As text: NaN is not equal to itself.
                    proptest::prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
                }
                false => proptest::prop_assert!(
                    !ids.iter().all(exact),
                    "values that encode exactly were left to the sort of documents"
                ),
            }
        }
    }
}
