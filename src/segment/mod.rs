//! STUB of the segment API (replaced by the real implementation on merge).
use crate::bucket::{BucketData, Column};
use crate::error::{Error, Result};
use crate::vfs::{write_atomic, FileBytes, Vfs};
use bson::oid::ObjectId;
use bson::{Bson, Document};
use std::path::{Path, PathBuf};

/// Header info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeaderInfo {
    /// collection
    pub collection_id: u32,
    /// time field
    pub time_field: String,
}

/// Summary.
#[derive(Debug, Clone)]
pub struct BucketSummary {
    /// id
    pub id: ObjectId,
    /// meta
    pub meta: Option<Bson>,
    /// count
    pub count: u32,
    /// min
    pub min: Document,
    /// max
    pub max: Document,
}

/// write
pub fn write_segment(
    vfs: &dyn Vfs,
    path: &Path,
    info: &SegmentHeaderInfo,
    buckets: &[&BucketData],
) -> Result<u64> {
    let mut d = Document::new();
    d.insert("coll", info.collection_id as i64);
    d.insert("time", info.time_field.clone());
    let mut arr = Vec::new();
    for b in buckets {
        let mut bd = Document::new();
        bd.insert("id", b.id);
        if let Some(m) = &b.meta {
            bd.insert("meta", m.clone());
        }
        bd.insert("count", b.count as i64);
        bd.insert("min", b.min.clone());
        bd.insert("max", b.max.clone());
        let cols: Vec<Bson> = b
            .columns
            .iter()
            .map(|c| {
                let mut cd = Document::new();
                cd.insert("n", c.name.clone());
                cd.insert(
                    "v",
                    c.values
                        .iter()
                        .map(|v| match v {
                            Some(v) => Bson::Array(vec![v.clone()]),
                            None => Bson::Array(vec![]),
                        })
                        .collect::<Vec<_>>(),
                );
                Bson::Document(cd)
            })
            .collect();
        bd.insert("cols", cols);
        bd.insert(
            "shapes",
            b.shapes
                .iter()
                .map(|s| Bson::Array(s.iter().map(|&x| Bson::Int64(x as i64)).collect()))
                .collect::<Vec<_>>(),
        );
        bd.insert(
            "rs",
            b.row_shapes
                .iter()
                .map(|&x| Bson::Int64(x as i64))
                .collect::<Vec<_>>(),
        );
        arr.push(Bson::Document(bd));
    }
    d.insert("b", arr);
    let bytes = d.to_vec().map_err(|e| Error::BadValue(e.to_string()))?;
    write_atomic(vfs, path, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Segment.
pub struct Segment {
    path: PathBuf,
    info: SegmentHeaderInfo,
    len: u64,
    summaries: Vec<BucketSummary>,
    data: Vec<BucketData>,
    _bytes: FileBytes,
}

impl Segment {
    /// open
    pub fn open(vfs: &dyn Vfs, path: &Path) -> Result<Segment> {
        let bytes = vfs.map(path)?;
        let c = |e: String| Error::corruption(path, 0, e);
        let d = Document::from_reader(&bytes[..]).map_err(|e| c(e.to_string()))?;
        let info = SegmentHeaderInfo {
            collection_id: d.get_i64("coll").map_err(|e| c(e.to_string()))? as u32,
            time_field: d.get_str("time").map_err(|e| c(e.to_string()))?.to_string(),
        };
        let mut summaries = Vec::new();
        let mut data = Vec::new();
        for b in d.get_array("b").map_err(|e| c(e.to_string()))? {
            let b = b.as_document().ok_or_else(|| c("b".into()))?;
            let id = b.get_object_id("id").map_err(|e| c(e.to_string()))?;
            let meta = b.get("meta").cloned();
            let count = b.get_i64("count").map_err(|e| c(e.to_string()))? as u32;
            let min = b.get_document("min").map_err(|e| c(e.to_string()))?.clone();
            let max = b.get_document("max").map_err(|e| c(e.to_string()))?.clone();
            let mut columns = Vec::new();
            for col in b.get_array("cols").map_err(|e| c(e.to_string()))? {
                let col = col.as_document().ok_or_else(|| c("col".into()))?;
                let values = col
                    .get_array("v")
                    .map_err(|e| c(e.to_string()))?
                    .iter()
                    .map(|v| v.as_array().and_then(|a| a.first().cloned()))
                    .collect();
                columns.push(Column {
                    name: col.get_str("n").map_err(|e| c(e.to_string()))?.to_string(),
                    values,
                });
            }
            let shapes = b
                .get_array("shapes")
                .map_err(|e| c(e.to_string()))?
                .iter()
                .map(|s| {
                    s.as_array()
                        .map(|a| a.iter().map(|x| x.as_i64().unwrap_or(0) as u32).collect())
                        .unwrap_or_default()
                })
                .collect();
            let row_shapes = b
                .get_array("rs")
                .map_err(|e| c(e.to_string()))?
                .iter()
                .map(|x| x.as_i64().unwrap_or(0) as u32)
                .collect();
            summaries.push(BucketSummary {
                id,
                meta: meta.clone(),
                count,
                min: min.clone(),
                max: max.clone(),
            });
            data.push(BucketData {
                id,
                meta,
                count,
                min,
                max,
                columns,
                shapes,
                row_shapes,
            });
        }
        Ok(Segment {
            path: path.to_path_buf(),
            info,
            len: bytes.len() as u64,
            summaries,
            data,
            _bytes: bytes,
        })
    }
    /// info
    pub fn info(&self) -> &SegmentHeaderInfo {
        &self.info
    }
    /// path
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// len
    pub fn len_bytes(&self) -> u64 {
        self.len
    }
    /// buckets
    pub fn buckets(&self) -> &[BucketSummary] {
        &self.summaries
    }
    /// read
    pub fn read_bucket(&self, i: usize) -> Result<BucketData> {
        self.data
            .get(i)
            .cloned()
            .ok_or_else(|| Error::corruption(&self.path, 0, "no bucket"))
    }
    /// read some
    pub fn read_bucket_columns(&self, i: usize, names: &[&str]) -> Result<BucketData> {
        let mut b = self.read_bucket(i)?;
        b.columns.retain(|c| names.contains(&c.name.as_str()));
        Ok(b)
    }
    /// verify
    pub fn verify(&self) -> Result<()> {
        Ok(())
    }
}
