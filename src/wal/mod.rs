//! STUB of the write-ahead log API (replaced by the real implementation on merge).
use crate::error::Result;
use crate::vfs::Vfs;
use std::path::Path;
use std::sync::Arc;

/// When appends are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// fsync before acknowledging.
    #[default]
    Always,
    /// fsync periodically.
    Periodic(std::time::Duration),
    /// never fsync.
    Never,
}

/// Options.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// sync
    pub sync: SyncMode,
    /// max record
    pub max_record_bytes: usize,
    /// rotate
    pub rotate_bytes: u64,
}
impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            sync: SyncMode::Always,
            max_record_bytes: 64 << 20,
            rotate_bytes: 64 << 20,
        }
    }
}

/// The log.
pub struct Wal<T: Send + 'static> {
    apply: parking_lot::Mutex<(u64, Box<dyn FnMut(u64, T) + Send>)>,
}

impl<T: Send + 'static> Wal<T> {
    /// open
    pub fn open(
        _vfs: Arc<dyn Vfs>,
        _dir: &Path,
        _opts: WalOptions,
        checkpoint: u64,
        _replay: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
        apply: Box<dyn FnMut(u64, T) + Send>,
    ) -> Result<Wal<T>> {
        Ok(Wal {
            apply: parking_lot::Mutex::new((checkpoint, apply)),
        })
    }
    /// append
    pub fn append(&self, _payload: Vec<u8>, item: T) -> Result<u64> {
        let mut g = self.apply.lock();
        g.0 += 1;
        let s = g.0;
        (g.1)(s, item);
        Ok(s)
    }
    /// last
    pub fn last_seq(&self) -> u64 {
        self.apply.lock().0
    }
    /// reclaim
    pub fn reclaim(&self, _upto: u64) -> Result<()> {
        Ok(())
    }
    /// size
    pub fn size_on_disk(&self) -> u64 {
        0
    }
    /// close
    pub fn close(self) -> Result<()> {
        Ok(())
    }
}
