//! Where a segment's bytes are: versions, and per bucket its page, offsets and column lengths.
//! Inspection tools (`segment-dump`) and size reports use it; reads do not need it.

use super::Segment;
use crate::error::{Error, Result};
use crate::segment::format as f;

/// Where one bucket's data sits in its segment file and how it is cut into columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketLayout {
    /// Index of the page holding the bucket.
    pub page: u32,
    /// Absolute file offset of that page's stored bytes (the offset a page error names).
    pub page_offset: u64,
    /// Length of the page as stored.
    pub page_stored_len: u32,
    /// True when the page is stored zstd-compressed (then `offset_in_page` counts bytes of the
    /// decompressed page).
    pub page_compressed: bool,
    /// Offset of the bucket's first column within the (decompressed) page.
    pub offset_in_page: u32,
    /// Encoded length of all its columns together.
    pub len: u32,
    /// Each column in stored order: its name and encoded length (the bytes of
    /// `codec::encode_column`, starting with the codec tag).
    pub columns: Vec<(String, u32)>,
}

impl Segment {
    /// The format version in the file's header (open accepts only versions this build reads).
    pub fn format_version(&self) -> u16 {
        f::le_u16(&self.bytes, f::HDR_VERSION).unwrap_or(f::FORMAT_VERSION)
    }

    /// The version of the file's directory (`format-spec/segment.md` section 2.3): 1 or 2.
    pub fn directory_version(&self) -> u8 {
        self.dir_version
    }

    /// Where bucket `i`'s data is; an error if there is no bucket `i`.
    pub fn bucket_layout(&self, i: usize) -> Result<BucketLayout> {
        let s = self.summary(i)?;
        let pg = self.page_info(s.loc.page as usize)?;
        let columns = self
            .columns_of(s)
            .iter()
            .map(|&(n, len)| {
                let name = self.names.get(n as usize).ok_or_else(|| {
                    Error::corruption(
                        &self.path,
                        self.dir_offset,
                        format!("bucket {i}: column name index {n} out of range"),
                    )
                })?;
                Ok((name.clone(), len))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BucketLayout {
            page: s.loc.page,
            page_offset: pg.offset,
            page_stored_len: pg.stored_len,
            page_compressed: pg.compression == f::PAGE_ZSTD,
            offset_in_page: s.loc.offset,
            len: s.loc.len,
            columns,
        })
    }
}
